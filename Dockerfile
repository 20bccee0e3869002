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
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
# `mlmodel` on PATH: the download Job's command is ["mlmodel", "download", ...].
RUN ln -s /app/bin/mlmodel.js /usr/local/bin/mlmodel \
  && rm -rf /usr/local/lib/node_modules/npm /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack
# The image's `node` user by number, so runAsNonRoot can verify it without a passwd lookup.
USER 1000:1000
ENTRYPOINT ["mlmodel"]
CMD ["operator", "--help"]
