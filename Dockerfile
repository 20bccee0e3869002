# syntax=docker/dockerfile:1
# The MLModel operator image: `mlmodel operator` runs the controllers and `mlmodel download`
# runs in the model download Jobs. Node 24 runs the TypeScript sources directly (type
# stripping), so there is no compile stage: one stage resolves production dependencies, the
# final stage holds only them and the sources. test/e2e/install/image.test.ts proves what
# this file copies is enough (npm ci --omit=dev into a clean directory runs both commands).

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

FROM node:${NODE_VERSION}-bookworm-slim
ENV NODE_ENV=production
# Node's compile cache (bin/mlmodel.js): the TypeScript-stripped sources and their bytecode,
# made below at build time, read-only at run time. Without it every start strips the sources
# again and keeps the type stripper (17 MiB) in memory.
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
# `mlmodel` on PATH: the download Job's command is ["mlmodel", "download", ...].
RUN ln -s /app/bin/mlmodel.js /usr/local/bin/mlmodel \
  && rm -rf /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
  && mkdir "$NODE_COMPILE_CACHE" && chown 1000:1000 "$NODE_COMPILE_CACHE"
# The image's `node` user by number, so runAsNonRoot can verify it without a passwd lookup.
USER 1000:1000
# Fill the compile cache as the user the pods run as (Node keeps one cache per user id):
# loading each command's modules once is enough.
RUN mlmodel operator --help > /dev/null && mlmodel download --help > /dev/null
ENTRYPOINT ["mlmodel"]
CMD ["operator", "--help"]
