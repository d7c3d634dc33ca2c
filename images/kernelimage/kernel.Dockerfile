# The kennel kernel image: python3, the kernel stub, a non-root user, the stub as entrypoint.
# `kennel image build` builds it through the Engine API with no registry: BASE is a Debian
# root file system made by debootstrap and imported (kennel-base:bookworm), BUNDLE the stub's
# bundle hash, and the build context holds the stub unpacked under stub/.
# A kernel container runs as the operator's uid:gid (docker run --user), not as this user.
ARG BASE=kennel-base:bookworm
FROM ${BASE}
ARG BUNDLE=
RUN python3 -c "import json, sys; assert sys.version_info >= (3, 9), sys.version" \
 && groupadd --system --gid 10001 kennel \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kennel
COPY stub/ /opt/kennel/stub/
ENV KENNEL_KERNEL_BUNDLE=${BUNDLE} KENNEL_KERNEL_OWNER=stdin MALLOC_MMAP_THRESHOLD_=33554432 HOME=/tmp LANG=C.UTF-8
LABEL dev.kennel.bundle=${BUNDLE}
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["/usr/bin/python3", "-I", "-S", "-c", "import sys;sys.path.insert(0,sys.argv[1]);from kennel._boot import main;main()", "/opt/kennel/stub"]
