# The fleettool agent image. The NVIDIA container runtime injects the driver's libnvidia-ml at run time, so
# the image carries no CUDA: Python, fleettool and what the agent imports, installed from a lock
# (requirements/agent.txt, pip-compile --generate-hashes: every distribution pinned, every file checked against
# its hash), so that two builds a week apart hold the same bytes. No textual, polars, pyarrow or numpy: the
# commands that need them exit 8 naming their extra (README: Set up).
#   docker build -t fleettool:0.1.0 .                                          # agent
#   docker build --build-arg LOCK=agent-fleet -t fleettool-fleet:0.1.0 .      # agent + --export-to (pyarrow, locked)
#   docker build --build-arg EXTRAS=burnin -t fleettool-burnin:0.1.0 .        # agent + burn-in (torch, NOT locked)
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fleettool ./fleettool
COPY collectors ./collectors
COPY tui ./tui
COPY rules ./rules
COPY runbooks ./runbooks
# fleettool itself only: its dependencies come from the lock below
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.12-slim
ARG LOCK=agent
ARG EXTRAS=""
COPY requirements/${LOCK}.txt /tmp/lock.txt
RUN python -m pip install --no-cache-dir --require-hashes --only-binary=:all: -r /tmp/lock.txt && rm /tmp/lock.txt
COPY --from=build /wheels /wheels
# --no-deps: the lock is the whole environment. EXTRAS (burnin: torch, the site's CUDA build) resolves on top of
# it, unpinned: pin torch yourself (pip's constraints) where the burn-in image must be reproducible.
RUN python -m pip install --no-cache-dir --no-deps /wheels/*.whl \
 && if [ -n "$EXTRAS" ]; then python -m pip install --no-cache-dir "$(ls /wheels/*.whl)[$EXTRAS]"; fi \
 && python -m pip check && rm -rf /wheels
# No USER: the deployment chooses. The DaemonSet runs it as uid 0, privileged, only to read /dev/kmsg (see
# deploy/kubernetes/agent-daemonset.yaml); without the kernel log the Helm chart runs it as uid 65532 with every
# capability dropped. The root filesystem is mounted read-only either way.
VOLUME ["/var/lib/fleettool"]
EXPOSE 9402
ENTRYPOINT ["fleettool"]
CMD ["agent", "--db=/var/lib/fleettool/fleet.duckdb", "--metrics-port=9402"]
