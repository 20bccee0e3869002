# syntax=docker/dockerfile:1
# The MLModel operator image: `mlmodel operator` runs the controllers and `mlmodel download`
# runs in the model download Jobs. One stage resolves production dependencies; one bundles
# the CLI with esbuild (src/images/bundle.ts: an operator of 38 modules instead of 123 uses
# less memory, bench/README.md, phase D); the final stage holds the production
# dependencies, the bundle (`mlmodel` on PATH) and the sources (which the bundle's source
# maps point to; `node bin/mlmodel.js` runs them unbundled). test/e2e/install/image.test.ts
# proves what this file copies is enough (both commands run from a clean directory).

ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Dev dependencies are dropped from package.json first: production needs none of them, and a
# lock file made against a partial registry mirror may lack their optional per-platform
# binaries, which `npm ci` would otherwise refuse. --ignore-scripts: no dependency's install
# script runs at build time.
RUN npm pkg delete devDependencies \
  && npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
  && npm cache clean --force

FROM node:${NODE_VERSION}-bookworm-slim AS bundle
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies and esbuild, the one dev dependency the bundle needs (the others
# are dropped for the reason above).
RUN node -e 'const p = require("./package.json"); p.devDependencies = { esbuild: p.devDependencies.esbuild }; require("node:fs").writeFileSync("package.json", JSON.stringify(p))' \
  && npm ci --ignore-scripts --no-audit --no-fund
COPY src ./src
RUN node src/images/bundle.ts dist/bundle

FROM node:${NODE_VERSION}-bookworm-slim
ENV NODE_ENV=production
# Node's compile cache: the bundle's bytecode (and, for `node bin/mlmodel.js`, the
# TypeScript-stripped sources), made below at build time, read-only at run time.
ENV NODE_COMPILE_CACHE=/app/.node-compile-cache
# A young generation of at most 2 x 2 MiB. V8 sizes it from the machine's memory (up to
# 2 x 64 MiB on a 24 GiB node), and a burst of watch events grew it that far: the operator
# caching 10,000 models held 226 MiB RSS with the default, 169 MiB with this (bench/README.md).
ENV NODE_OPTIONS=--max-semi-space-size=2
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY --from=bundle /app/dist/bundle ./dist/bundle
# `mlmodel` on PATH, the bundle's entry: the download Job's command is ["mlmodel", "download", ...].
RUN ln -s /app/dist/bundle/mlmodel.mjs /usr/local/bin/mlmodel \
  && rm -rf /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
  && mkdir "$NODE_COMPILE_CACHE" && chown 1000:1000 "$NODE_COMPILE_CACHE"
# The image's `node` user by number, so runAsNonRoot can verify it without a passwd lookup.
USER 1000:1000
# Fill the compile cache as the user the pods run as (Node keeps one cache per user id):
# loading each command's modules once is enough.
RUN mlmodel operator --help > /dev/null && mlmodel download --help > /dev/null
ENTRYPOINT ["mlmodel"]
CMD ["operator", "--help"]
