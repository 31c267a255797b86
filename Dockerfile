# syntax=docker/dockerfile:1
#
# actloop's images, all from one static binary (cmd/actloop):
#
#   target actloop     gcr.io/distroless/static-debian12:nonroot: no shell, no
#                      package manager, runs as nonroot (65532). For the
#                      coordinator, gen-worker, predictor-gw and gateway
#                      (`actloop serve NAME`) and the inference simulator
#                      (`actloop sim`): they only speak NATS, Redis and HTTP.
#                      The default target.
#   target env-worker  debian:bookworm-slim with bash, git, bubblewrap,
#                      coreutils and ca-certificates, run as the non-root user
#                      actloop (10001). The env-worker's local sandbox backend
#                      runs the model's commands with the real bash, under
#                      bwrap, and takes the diff with git, so it needs a
#                      userland; distroless has none.
#
# Health checks use `actloop probe URL`, since neither image has curl.
#
#   docker build -t actloop:local .
#   docker build -t actloop-env-worker:local --target env-worker .

ARG GO_VERSION=1.26
# The version the binary reports (`actloop --version`, service.version on
# traces): the build context has no .git, so name it, e.g.
#   docker build --build-arg VERSION=$(git describe --always --dirty) .
ARG VERSION=(devel)

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/actloop/actloop/internal/telemetry.stamped=${VERSION}" -o /out/actloop ./cmd/actloop

FROM debian:bookworm-slim AS env-worker
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash git bubblewrap coreutils ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 actloop \
 && useradd --system --uid 10001 --gid actloop --home-dir /var/lib/actloop --create-home --shell /usr/sbin/nologin actloop
COPY --from=build /out/actloop /usr/local/bin/actloop
# Sandboxes live under the worker's home; mount a volume there to keep them
# across restarts (a restarted worker finds its sandboxes again).
ENV ACTLOOP_SANDBOX_ROOT=/var/lib/actloop/sandboxes
WORKDIR /var/lib/actloop
USER 10001:10001
EXPOSE 8082
ENTRYPOINT ["/usr/local/bin/actloop"]
CMD ["serve", "env-worker"]

FROM gcr.io/distroless/static-debian12:nonroot AS actloop
COPY --from=build /out/actloop /usr/local/bin/actloop
USER 65532:65532
EXPOSE 8080 8081 8083 8084 30000
ENTRYPOINT ["/usr/local/bin/actloop"]
CMD ["help"]
