# syntax=docker/dockerfile:1.7
# p4fleet operator image.
#   docker build -t ghcr.io/p4fleet/p4fleet:0.1.0 .
# The default command is `p4fleet operator`; other subcommands can be given
# as container args.

# ---- build ------------------------------------------------------------------
# Debian 12 builder so the glibc the binary links against matches the
# distroless cc-debian12 runtime below.
FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src

# gRPC code is generated with protox (pure Rust), so no protoc is needed.
# Line tables are dropped to keep the image small; symbols stay for backtraces.
ENV CARGO_TERM_COLOR=never \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_INCREMENTAL=0

COPY . .

# .git is not in the build context: `p4fleet version` takes the commit from
# here (docker build --build-arg P4FLEET_COMMIT=$(git rev-parse --short=12 HEAD)).
ARG P4FLEET_COMMIT=unknown
ENV P4FLEET_COMMIT=$P4FLEET_COMMIT

# Cache mounts keep the registry and target dir across builds; the binary is
# copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p p4fleet --bin p4fleet \
 && install -D -m 0755 target/release/p4fleet /out/p4fleet

# ---- runtime ----------------------------------------------------------------
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="p4fleet" \
      org.opencontainers.image.description="Kubernetes operator for fleets of programmable (P4) switches" \
      org.opencontainers.image.source="https://github.com/p4fleet/p4fleet" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=build /out/p4fleet /p4fleet

# distroless "nonroot"; numeric so runAsNonRoot can verify it.
USER 65532:65532
# One port: /metrics, /livez, /readyz.
EXPOSE 8080

ENTRYPOINT ["/p4fleet"]
CMD ["operator"]
