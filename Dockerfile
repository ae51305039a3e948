# syntax=docker/dockerfile:1
# slo-operator image: the operator (`slo-operator run`) and the in-pod runtime (slo_runtime:
# gateway, launcher, probe). The runtime is not run from this image inside vLLM pods: an init
# container copies the package into a shared volume and vLLM's own Python runs it, so
# slo_runtime imports nothing outside vLLM 0.32.0's dependency closure
# (tests/packaging/test_image.py). That init container needs sh, cp and python3 here.
#
# Bases are pinned to an exact release; pin digests too where the registry is reachable
# (`docker buildx imagetools inspect python:3.11.13-slim-bookworm`).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# ---- build: resolve and install the wheels into a virtual environment -------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /venv
# Only the controller and the in-pod runtime: slo-devtools (demo, simulator, dev cluster,
# plots) never enters the image.
COPY operator ./operator
COPY runtime ./runtime
# Only wheels: a dependency that would need a compiler fails the build instead of pulling
# build tools in.
RUN /venv/bin/pip install --only-binary=:all: --no-binary=slo-operator,slo-runtime \
      ./runtime ./operator \
 && /venv/bin/pip uninstall --yes pip setuptools wheel \
 && find /venv -name '__pycache__' -prune -exec rm -rf {} +

# ---- final: the same Python, the venv, no package managers ------------------------------
FROM ${PYTHON_IMAGE}
# pip and setuptools of the base are build tools too; the operator never installs anything.
# (A base built from Debian packages, hack/build-image.sh, has no pip to remove.)
# The user is added first (groupadd/useradd), then the package managers go: apt and dpkg
# with their state (/var/lib/dpkg, /var/lib/apt, /etc/apt), and ensurepip with the wheels it
# installs pip from. Nothing here needs them: the operator runs from /venv, and the init
# container that copies slo_runtime out needs only sh, cp and python3.
RUN if python -m pip --version >/dev/null 2>&1; then \
      python -m pip uninstall --yes pip setuptools wheel; fi \
 && groupadd --gid 65532 slo \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin slo \
 && ensurepip="$(python -c 'import ensurepip, os; print(os.path.dirname(ensurepip.__file__))')" \
 && rm -rf "$ensurepip" /usr/share/python-wheels /root/.cache \
      /usr/bin/apt /usr/bin/apt-* /usr/lib/apt /etc/apt /var/lib/apt /var/cache/apt \
      /var/log/apt /usr/bin/dpkg /usr/bin/dpkg-* /usr/sbin/dpkg-* /usr/lib/dpkg /etc/dpkg \
      /var/lib/dpkg /var/log/dpkg.log
COPY --from=build /venv /venv
ENV PATH=/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: kopf health (liveness/readiness); 8081: the operator's /metrics (chart values).
EXPOSE 8080 8081
ENTRYPOINT ["slo-operator"]
CMD ["run"]
