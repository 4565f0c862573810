# Corolla in a container: a Debian 12 build stage, then a slim runtime with the binary (the web pages are built
# into it) and the default API configuration.
#
#   podman build -t corolla .            (or docker build)
#   podman run --rm -p 8080:8080 -v corolla-cache:/root/.cache corolla                 # corolla run: the demo swarm
#   podman run --rm -v corolla-cache:/root/.cache corolla run --prompt "Name the capital of France."
#   podman run --rm --network host -v corolla-cache:/root/.cache corolla serve org/name --block_indices 0:8 \
#       --initial_peers HOST:PORT
# /root/.cache holds the demo model, the Hugging Face Hub cache (models by name) and node databases; keep it in a
# volume. compose.yaml runs a private swarm (a DHT node, two servers, the API).
ARG BASE=debian:12

FROM ${BASE} AS build
WORKDIR /src
COPY tools/setup.sh tools/fetch_demo_model.sh tools/
# The packages and the demo model first, in a layer of their own (tools/setup.sh installs them by name and fetches
# the model; without it the image still builds, and `corolla run` says how to fetch it).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates && \
    COROLLA_CACHE=/opt/corolla SETUP_SKIP_BUILD=1 bash tools/setup.sh && mkdir -p /opt/corolla/demo && \
    rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOROLLA_CUDA=OFF >/dev/null && \
    cmake --build build -j"$(nproc)" --target corolla
# The Debian packages of the shared libraries the binary loads: what the runtime stage installs, read off the
# binary rather than kept by hand.
RUN ldd build/bin/corolla | awk '/=> \//{print $3}' | xargs -r readlink -f | xargs -r dpkg -S 2>/dev/null | \
    cut -d: -f1 | sort -u > /runtime-packages && test -s /runtime-packages

FROM ${BASE} AS runtime
COPY --from=build /runtime-packages /tmp/runtime-packages
RUN apt-get update -qq && \
    xargs -a /tmp/runtime-packages apt-get install -y -qq --no-install-recommends ca-certificates && \
    rm -rf /var/lib/apt/lists/* /tmp/runtime-packages
COPY --from=build /src/build/bin/corolla /usr/local/bin/corolla
COPY --from=build /opt/corolla/demo /usr/local/share/corolla/demo
COPY config/api.toml /etc/corolla/api.toml
COPY tools/container_entrypoint.sh /usr/local/bin/container_entrypoint.sh
EXPOSE 8080 31330
ENTRYPOINT ["/usr/local/bin/container_entrypoint.sh"]
CMD ["run", "--host", "0.0.0.0"]
