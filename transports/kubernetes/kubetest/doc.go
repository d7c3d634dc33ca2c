// Package kubetest is the Kubernetes transport's test fixture: a real single-node cluster,
// built here from the Go module proxy and Debian's packages, started once per test binary
// and brought down after its tests.
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
//
//	func TestX(t *testing.T) {
//		c := kubetest.Cluster(t) // c.Client, c.Config, c.Namespace, c.Image
//		...
//	}
//
// # The cluster
//
// cluster/cluster.sh runs, all on loopback, as root: an embedded etcd, kube-apiserver
// (token auth, RBAC), kube-scheduler and kube-controller-manager (so pods are ordinary
// scheduled pods and namespaces get their "default" ServiceAccount), a private containerd
// 1.6 with CRI (its own root, state and socket; restrict_oom_score_adj, as this machine's
// bounding set lacks CAP_SYS_RESOURCE) and a kubelet (node "localhost", cgroupfs,
// failCgroupV1 false, makeIPTablesUtilChains false, podPidsLimit 1024, no static pods, no
// cluster DNS, no kube-proxy).
// k8s.io/kubernetes v1.37.2 is built by cluster/build.sh in cluster/src, a module of its
// own (kennel's module needs only client-go), into /var/cache/kennel/kubernetes/<key>,
// where key is the first 16 hex digits of the sha256 of src/ (go.mod, go.sum, sources),
// build.sh and `go version`: a hit builds nothing, a new key removes the older keys'
// outputs. cluster/install.sh (run by .ci/install) installs the Debian packages it needs
// and builds on a miss (12-25 minutes cold on 2 cores).
//
// The kernel image of the embedded stub is streamed from the machine's Docker Engine
// (`docker save`, no registry) into the k8s.io namespace of the private containerd, named
// docker.io/library/kennel-kernel:<hash12> (C.Image); pods name it with imagePullPolicy
// Never. The sandbox image is PauseImage, made offline (C.Pause). Nothing is ever pulled.
//
// # The pod network
//
// Pods are on a host-only bridge (Bridge, subnet PodCIDR; Debian's containernetworking-
// plugins bridge and host-local) that has no address on the host side: no IPv4
// (isGateway false) and no IPv6 (cluster.sh makes the bridge with IPv6 off before the first
// pod; else its link-local address would let a pod reach a host service listening on [::]
// as fe80::…%eth0). No routes beyond the subnet, no masquerade, no kube-proxy. A pod has its
// loopback and an address in PodCIDR; its only IPv4 route is the subnet's and its IPv6
// routes are link-local. Measured from a pod, with host services listening on 0.0.0.0 and
// [::] (TestPodNetworkEndsAtTheBridge checks each):
//
//   - an outside address (1.1.1.1, 2606:4700:4700::1111), the host's eth0 address, a
//     service address (10.96.0.1): ENETUNREACH at once;
//   - the host's loopback: unreachable; 127.0.0.1 and ::1 in a pod are the pod's own
//     (ECONNREFUSED);
//   - the link-local addresses of the host ends of the veths: no answer (timeout);
//   - another pod on the bridge: the host's bridge netfilter decides (Docker's FORWARD DROP
//     policy here: timeout); not something to rely on either way.
//
// The pods get the host's resolv.conf (there is no cluster DNS) and no route to its
// resolver. The CNI enforces no NetworkPolicy: a policy object is accepted and has no
// effect, so a "no network" test on this cluster rests on the absence of routes, not on a
// policy. Kubelet's podPidsLimit (1024) is the pods' pids limit.
//
// # Lifetime
//
// The cluster's ports are fixed (API 16443, etcd 23790, kubelet 10250, scheduler 10259,
// controller-manager 10257), so a test binary holds LockFile for the life of its cluster
// and another one waits in Cluster (up to LockWait). The lock file names the holder's run
// directory: a cluster whose test binary died (a test timeout, SIGKILL) is brought down by
// the next Cluster call on the machine, or by hand with `cluster/cluster.sh down DIR`.
// Main brings the cluster down: pods deleted gracefully (so CNI DEL runs), every process
// ended, the mounts, network namespaces, veths, bridge and kubepods cgroups removed, the
// sysctls kubelet rewrites (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
// kernel.panic_on_oops) put back, and the run directory (C.Dir, in /tmp; component logs in
// C.Dir/logs) removed. TestDownLeavesNothing checks that nothing is left.
//
// Cluster needs root, containerd, runc, ctr, openssl, curl, bc, iproute2, the CNI plugins,
// the built binaries and the Docker kernel image of the current stub (`.ci/kernel-image`):
// a test without one fails under CI=true and skips elsewhere (internal/testneed), naming
// it and InstallCommand.
package kubetest
