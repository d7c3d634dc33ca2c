package kubetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Bridge is the pod network's bridge on the host (cluster.sh's BRIDGE).
const Bridge = "kubetest0"

// PodCIDR is the pod network's subnet (cluster.sh's POD_CIDR).
const PodCIDR = "10.244.0.0/24"

// sysctls are the ones kubelet rewrites and cluster.sh puts back.
var sysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops"}

// hostState is what a cluster could leave on the host: the parts of it another test on
// the machine (Docker, containerd, mounts of its own) does not touch.
type hostState struct {
	netns    []string          // /run/netns entries
	veths    map[string]string // veth name -> its master ("" for none)
	iptables []string          // chains and rules of every table that name Kubernetes, CNI or the pod network
	sysctls  map[string]string
	paths    map[string]bool // hostPaths: whether each exists
}

// hostPaths are made at fixed paths whatever the cluster is told: by kubelet (its device
// plugin socket, container log links), containerd's CNI library (its result cache) and
// kubectl (its discovery cache, when not given --cache-dir).
var hostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/root/.kube/cache/discovery/127.0.0.1_16443"}

// snapshot reads the host's state.
func snapshot() (hostState, error) {
	s := hostState{veths: map[string]string{}, sysctls: map[string]string{}, paths: map[string]bool{}}
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		s.paths[p] = err == nil
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			s.netns = append(s.netns, e.Name())
		}
	} else if !os.IsNotExist(err) {
		return s, err
	}
	out, err := exec.Command("ip", "-j", "link", "show", "type", "veth").Output()
	if err != nil {
		return s, fmt.Errorf("ip link: %w", err)
	}
	var links []struct {
		Name   string `json:"ifname"`
		Master string `json:"master"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return s, fmt.Errorf("ip -j link: %w", err)
	}
	for _, l := range links {
		s.veths[l.Name] = l.Master
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		out, err := exec.Command(tool).Output()
		if err != nil {
			return s, fmt.Errorf("%s: %w", tool, err)
		}
		table := ""
		for l := range strings.Lines(string(out)) {
			l = strings.TrimSuffix(l, "\n")
			if strings.HasPrefix(l, "*") {
				table = l[1:]
			}
			if strings.HasPrefix(l, "#") || !ours(l) {
				continue
			}
			if strings.HasPrefix(l, ":") { // ":CHAIN POLICY [packets:bytes]"
				l = strings.Fields(l)[0]
			}
			s.iptables = append(s.iptables, tool+" "+table+" "+l)
		}
	}
	for _, k := range sysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return s, err
		}
		s.sysctls[k] = strings.TrimSpace(string(b))
	}
	return s, nil
}

// ours reports whether an iptables line names what a cluster here could add.
func ours(l string) bool {
	return slices.ContainsFunc([]string{"KUBE", "CNI", "cni", Bridge, "10.244."}, func(w string) bool { return strings.Contains(l, w) })
}

// leftovers lists what the cluster of run directory dir and binaries bin left on the host
// after down, compared with before (its host state before up): processes, mounts, network
// namespaces, veths, iptables chains and rules, kubepods cgroups, the bridge, the run
// directory, hostPaths it made, sysctls not put back.
func leftovers(before hostState, dir, bin string) ([]string, error) {
	var left []string
	after, err := snapshot()
	if err != nil {
		return nil, err
	}
	// Only what the cluster makes counts: containerd's pod netns ("cni-<uuid>") and the
	// bridge plugin's host-side veths ("veth<hex>", and any on its bridge). Other tests
	// of the tree run beside it (sshtest's partition namespaces, "ktssh*", "kta*", "ktb*").
	for _, ns := range after.netns {
		if strings.HasPrefix(ns, "cni-") && !slices.Contains(before.netns, ns) {
			left = append(left, "netns "+ns)
		}
	}
	for name, master := range after.veths {
		if _, ok := before.veths[name]; ok || (master != Bridge && !strings.HasPrefix(name, "veth")) {
			continue
		}
		if master == "" || master == Bridge {
			left = append(left, fmt.Sprintf("veth %s (master %q)", name, master))
		}
	}
	for _, l := range after.iptables {
		if !slices.Contains(before.iptables, l) {
			left = append(left, "iptables: "+l)
		}
	}
	for k, v := range after.sysctls {
		if before.sysctls[k] != v {
			left = append(left, fmt.Sprintf("sysctl %s = %s (was %s)", k, v, before.sysctls[k]))
		}
	}
	for p, ok := range after.paths {
		if ok && !before.paths[p] {
			left = append(left, "path "+p)
		}
	}
	if _, err := os.Lstat(filepath.Join("/sys/class/net", Bridge)); err == nil {
		left = append(left, "link "+Bridge)
	}
	if _, err := os.Lstat(dir); err == nil {
		left = append(left, "run directory "+dir)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, c := range cgs {
		left = append(left, "cgroup "+c)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for l := range strings.Lines(string(mounts)) {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.Contains(l, dir+"/") ||
			(strings.HasPrefix(f[4], "/run/netns/cni-") && !slices.Contains(before.netns, filepath.Base(f[4])))) {
			left = append(left, "mount "+f[4])
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue // gone
		}
		cmd := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		exe, _ := os.Readlink(filepath.Join(p, "exe"))
		if strings.Contains(cmd, dir) || strings.Contains(cmd, bin+"/") || strings.HasPrefix(exe, bin+"/") || bytes.Contains(cg, []byte("/kubepods")) {
			left = append(left, fmt.Sprintf("process %s: %.200s", filepath.Base(p), cmd))
		}
	}
	slices.Sort(left)
	return left, nil
}
