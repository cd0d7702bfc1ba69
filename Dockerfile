# cronlease in a container: a Rust build stage, then a Debian slim runtime
# that holds the binary, CA certificates (for rediss://) and curl (the
# health check). docs/src/containers.md explains the image, the compose file and
# the Kubernetes manifests.
#
#   docker build -t cronlease .
#   docker run -v "$PWD/jobs.toml:/etc/cronlease/jobs.toml:ro" cronlease
#
# The base images are arguments so that a build without Docker Hub can name
# local ones (scripts/container-test does).
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
# Parallel compile jobs ("default": one per CPU); on a shared build host,
# --build-arg CARGO_BUILD_JOBS=1.
ARG CARGO_BUILD_JOBS=default
WORKDIR /src
COPY . .
# The registry and the target directory are build caches, so a rebuild
# compiles only what changed; the binary is copied out of the cache in the
# same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p cronlease-cli --bin cronlease \
    && install -D -m 0755 target/release/cronlease /out/cronlease

FROM ${RUNTIME_IMAGE} AS runtime
# Debian's security updates replace the versions in the archive, so pinned
# versions would stop the image from building; the base image's tag pins
# the release instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# A system user with fixed ids, so that Kubernetes' runAsNonRoot can check
# the image's user and a volume can be prepared for it. The state directory
# (the spool) is 0700 like the one systemd makes; mount a volume there.
RUN groupadd --system --gid 10001 cronlease \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/cronlease \
       --no-create-home --shell /usr/sbin/nologin cronlease \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/cronlease \
    && install -d -m 0755 /etc/cronlease
COPY --from=build /out/cronlease /usr/bin/cronlease
USER 10001:10001
WORKDIR /var/lib/cronlease
# /metrics and /healthz ([daemon] metrics_listen). A probe from outside the
# container needs metrics_listen = "0.0.0.0:9464" in the job table; the
# HEALTHCHECK below runs inside the container and also works with the
# default 127.0.0.1:9464.
EXPOSE 9464
# The replica drains on SIGTERM: no more claims, runs get shutdown_grace,
# then SIGTERM, kill_grace, SIGKILL; outcomes recorded, leases released,
# exit 0. Give the runtime a stop timeout above shutdown_grace + kill_grace
# (docker stop --time / stop_grace_period / terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# 200 once the scheduler loop runs and Redis answers, 503 with the reason
# otherwise (a replica waits for Redis for as long as it takes).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["curl", "--fail", "--silent", "--show-error", "--max-time", "2", "--output", "/dev/null", "http://127.0.0.1:9464/healthz"]
# cronlease is PID 1: it handles SIGTERM itself and, as PID 1, reaps the
# orphans the kernel hands it (a job's leftovers, a double-forked daemon),
# so no init such as tini is needed.
ENTRYPOINT ["/usr/bin/cronlease"]
CMD ["run", "--config", "/etc/cronlease/jobs.toml"]
