# check=error=true

# The informerhub image: static binaries on distroless, running as the
# non-root user 65532: informerhub (the entrypoint), informerhub-export
# (which exports the hub's changes to NATS JetStream or CloudEvents;
# the chart runs it with command: [/usr/local/bin/informerhub-export]),
# and hubctl for debugging.
#
#   docker build -t ghcr.io/informerhub/informerhub:v0.1.0 \
#     --build-arg VERSION=v0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# It needs BuildKit (docker build's builder since Docker 23): the build
# stage cross-compiles on $BUILDPLATFORM and caches Go's build cache.
#
# The image has no default flags: the hub's defaults serve loopback only.
# deploy/ runs it with TLS, Kubernetes authentication and metrics; see
# deploy/README.md. `make lint` checks this file with BuildKit's own linter
# (tools/dockerfilelint: the checks of `docker build --check`), and the
# check directive above makes `docker build` itself fail on a finding.

# The build runs on the builder's platform and cross-compiles, so a
# multi-platform build (--platform linux/amd64,linux/arm64) needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
WORKDIR /src

# The modules first: this layer is rebuilt only when a go.mod or go.sum
# changes, not with every change of source. gen and clients/go are modules
# of their own that the root module replaces with its directories.
COPY go.mod go.sum ./
COPY gen/go.mod gen/go.sum ./gen/
COPY clients/go/go.mod clients/go/go.sum ./clients/go/
RUN go mod download

COPY . .
ARG TARGETOS TARGETARCH
# informerhub --version, its startup log and its build-info metric show these
# (main.version and main.revision; informerhub-export and hubctl have none).
ARG VERSION=dev
ARG REVISION=""
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/ ./cmd/informerhub ./cmd/informerhub-export ./cmd/hubctl

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=""
LABEL org.opencontainers.image.title="informerhub" \
      org.opencontainers.image.description="Kubernetes objects streamed over gRPC: one shared informer per resource type, exact resume" \
      org.opencontainers.image.source="https://github.com/informerhub/informerhub" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/informerhub /out/informerhub-export /out/hubctl /usr/local/bin/
# distroless's nonroot user, by number, so that Kubernetes can check
# runAsNonRoot without reading /etc/passwd.
USER 65532:65532
# The hub's gRPC (--listen), and metrics and probes (--metrics-listen);
# informerhub-export serves only metrics (its own --metrics-listen).
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/informerhub"]
