package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
)

// reach is a python3 program that tries a TCP connection (3 s at most) to each
// "name|host|port" of its argv and prints {name: "connected" or the errno's name or
// "timeout"}, with the pod's IPv4 and IPv6 route destinations.
const reach = `import errno, json, socket, sys
res = {}
for t in sys.argv[1:]:
    name, host, port = t.split("|")
    try:
        fam, _, _, _, addr = socket.getaddrinfo(host, int(port), 0, socket.SOCK_STREAM)[0]
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
        try:
            s.connect(addr); res[name] = "connected"
        finally:
            s.close()
    except socket.timeout:
        res[name] = "timeout"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e))
v4 = [l.split()[1] for l in open("/proc/net/route").read().splitlines()[1:]]
v6 = [l.split()[0] + "/" + l.split()[1] + " " + l.split()[-1] for l in open("/proc/net/ipv6_route").read().splitlines()]
print(json.dumps({"connect": res, "v4": v4, "v6": v6}))`

// hostAddr is the host's default-route interface (eth0 here) and its IPv4 address.
func hostAddr(t *testing.T) (string, string) {
	t.Helper()
	f, err := os.Open("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) > 2 && fl[1] == "00000000" {
			ifc, err := net.InterfaceByName(fl[0])
			if err != nil {
				t.Fatal(err)
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if ip, _, _ := net.ParseCIDR(a.String()); ip != nil && ip.To4() != nil {
					return fl[0], ip.String()
				}
			}
		}
	}
	t.Fatal("no default route with an IPv4 address on the host")
	return "", ""
}

// bridgePortAddrs are the IPv6 link-local addresses of the bridge's ports on the host (the
// host ends of the pods' veths).
func bridgePortAddrs(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ifc := range ifs {
		m, err := os.Readlink(filepath.Join("/sys/class/net", ifc.Name, "master"))
		if err != nil || filepath.Base(m) != Bridge {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, _, _ := net.ParseCIDR(a.String()); ip != nil && ip.IsLinkLocalUnicast() {
				out = append(out, ip.String())
			}
		}
	}
	return out
}

// listen accepts (and closes) connections on a host address until t ends; it returns the port.
func listen(t *testing.T, network, addr string) string {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestPodNetworkEndsAtTheBridge checks what a pod on the pod network can reach, with host
// services listening on every IPv4 and every IPv6 address: nothing past the bridge's
// subnet (no default route: the outside, the host's address, service addresses fail with
// ENETUNREACH), not the host through the bridge (it has no address, IPv6 off), and not the
// host's loopback (127.0.0.1 in a pod is its own).
func TestPodNetworkEndsAtTheBridge(t *testing.T) {
	c := Cluster(t)
	ifc, host := hostAddr(t)
	p4 := listen(t, "tcp4", "0.0.0.0:0")
	p6 := listen(t, "tcp6", "[::]:0")
	a := runPod(t, c, nil)
	b := runPod(t, c, nil) // a second pod on the bridge, listening
	br, err := net.InterfaceByName(Bridge)
	if err != nil {
		t.Fatalf("bridge %s: %v", Bridge, err)
	}
	if addrs, _ := br.Addrs(); len(addrs) != 0 {
		t.Errorf("bridge %s has addresses on the host: %v", Bridge, addrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// the listener in pod b ends at its stdin's EOF
	lr, lw := io.Pipe()
	stdinR, stdinW := io.Pipe()
	listened := make(chan error, 1)
	go func() {
		listened <- executor(t, c, b.Name, "fallback", "python3", "-c",
			"import socket, sys; s = socket.create_server(('', 8080)); print('listening', flush=True); sys.stdin.read()").
			StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: lw, Stderr: lw})
		lw.Close()
	}()
	defer func() {
		stdinW.Close()
		if err := <-listened; err != nil {
			t.Errorf("listener in pod %s: %v", b.Name, err)
		}
	}()
	if l, _ := bufio.NewReader(lr).ReadString('\n'); l != "listening\n" {
		t.Fatalf("listener in pod %s: %q", b.Name, l)
	}
	go io.Copy(io.Discard, lr)

	type target struct{ name, addr, want string }
	targets := []target{
		{"the outside", "1.1.1.1|53", "ENETUNREACH"},
		{"the host's " + ifc, host + "|" + p4, "ENETUNREACH"},
		{"a service address", "10.96.0.1|443", "ENETUNREACH"},
		{"the host's loopback", "127.0.0.1|" + p4, "ECONNREFUSED"}, // the pod's own loopback
		{"the host's IPv6 loopback", "::1|" + p6, "ECONNREFUSED"},
		{"the outside over IPv6", "2606:4700:4700::1111|53", "ENETUNREACH"},
		{"another pod", b.Status.PodIP + "|8080", ""}, // reported, not required
	}
	for _, ll := range bridgePortAddrs(t) {
		targets = append(targets, target{"the host's veth " + ll, ll + "%eth0|" + p6, "not connected"})
	}
	args := []string{"python3", "-c", reach}
	for _, tg := range targets {
		args = append(args, tg.name+"|"+tg.addr)
	}
	var out, stderr bytes.Buffer
	if err := executor(t, c, a.Name, "fallback", args...).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &stderr}); err != nil {
		t.Fatalf("exec: %v: %s", err, stderr.String())
	}
	var got struct {
		Connect map[string]string `json:"connect"`
		V4, V6  []string
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	t.Logf("from pod %s (%s): IPv4 route destinations %v, IPv6 %v", a.Name, a.Status.PodIP, got.V4, got.V6)
	for _, r := range got.V4 {
		if r == "00000000" {
			t.Errorf("the pod has a default IPv4 route: %v", got.V4)
		}
	}
	for _, r := range got.V6 {
		if strings.HasPrefix(r, strings.Repeat("0", 32)+"/00 ") && !strings.HasSuffix(r, " lo") {
			t.Errorf("the pod has a default IPv6 route: %v", got.V6)
		}
	}
	for _, tg := range targets {
		g := got.Connect[tg.name]
		t.Logf("connect to %s (%s): %s", tg.name, tg.addr, g)
		switch tg.want {
		case "":
		case "not connected":
			if g == "connected" || g == "ECONNREFUSED" {
				t.Errorf("a pod reaches %s (%s): %s", tg.name, tg.addr, g)
			}
		default:
			if g != tg.want {
				t.Errorf("connect to %s (%s) from a pod: %s, want %s", tg.name, tg.addr, g, tg.want)
			}
		}
	}
}
