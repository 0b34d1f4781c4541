# The fleettool agent image. The NVIDIA container runtime injects the driver's libnvidia-ml at run time, so
# the image carries no CUDA: Python, fleettool and its dependencies (torch only in the burn-in image below).
#   docker build -t fleettool:0.1.0 .                      # agent
#   docker build --build-arg EXTRAS=burnin -t fleettool-burnin:0.1.0 .   # agent + burn-in (torch)
FROM python:3.12-slim AS build
ARG EXTRAS=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fleettool ./fleettool
COPY collectors ./collectors
COPY tui ./tui
COPY rules ./rules
COPY runbooks ./runbooks
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links=/wheels /wheels/*.whl && rm -rf /wheels
# No USER: the deployment chooses. The DaemonSet runs it as uid 0, privileged, only to read /dev/kmsg (see
# deploy/kubernetes/agent-daemonset.yaml); without the kernel log the Helm chart runs it as uid 65532 with every
# capability dropped. The root filesystem is mounted read-only either way.
VOLUME ["/var/lib/fleettool"]
EXPOSE 9402
ENTRYPOINT ["fleettool"]
CMD ["agent", "--db=/var/lib/fleettool/fleet.duckdb", "--metrics-port=9402"]
