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
# uid 0 is kept only for CAP_SYSLOG on /dev/kmsg (see deploy/kubernetes/agent-daemonset.yaml); the pod drops
# every other capability and mounts the root filesystem read-only.
VOLUME ["/var/lib/fleettool"]
EXPOSE 9402
ENTRYPOINT ["fleettool"]
CMD ["agent", "--db=/var/lib/fleettool/fleet.duckdb", "--metrics-port=9402"]
