# pipetune's images, installed at build time (a container only runs its command):
#   target `service`: the API, the CLI and run workers (no Ray, no GPU library);
#   target `fleet`:   the same with Ray (the pinned `fleet` extra) and CuPy for CUDA 12,
#                     for the Ray head (which runs the fleet's run manager) and GPU nodes.
# docker-compose.yml builds both; README.md ("Deployment") explains the topology.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pipetune pipetune
COPY scheduler_search scheduler_search
COPY codegen codegen
COPY workers workers
COPY service service
COPY migrations migrations
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIPETUNE_DATA_DIR=/var/lib/pipetune
RUN useradd --create-home --uid 1000 pipetune \
    && mkdir -p /var/lib/pipetune && chown pipetune /var/lib/pipetune

FROM runtime AS service
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir /wheels/pipetune-*.whl
USER pipetune
EXPOSE 8000
CMD ["pipetune", "serve", "--host", "0.0.0.0", "--port", "8000"]

FROM runtime AS fleet
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir "$(ls /wheels/pipetune-*.whl)[fleet,gpu-cuda12]"
USER pipetune
# The Ray head's GCS, its dashboard, and the ports Ray's node and workers listen on
# (docker-compose.yml pins them so that a firewall can name them).
EXPOSE 6379 8265 8076 8077 10002-10100
CMD ["pipetune", "worker"]
