package kubernetes_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
)

// TestConnect: the kubeconfig is found the usual ways (explicit, KUBECONFIG), its
// context's namespace is the client's; no configuration, or a server nobody answers on, is
// transports.ErrUnavailable.
func TestConnect(t *testing.T) {
	c := kubetest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := kube.Connect(ctx, kube.ConnectOptions{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	if cli.Namespace() != "default" {
		t.Errorf("namespace %q, want the context's (none: default)", cli.Namespace())
	}
	t.Setenv("KUBECONFIG", c.Kubeconfig)
	if _, err := kube.Connect(ctx, kube.ConnectOptions{}); err != nil {
		t.Errorf("connect through KUBECONFIG: %v", err)
	}

	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := kube.Connect(ctx, kube.ConnectOptions{}); !errors.Is(err, transports.ErrUnavailable) {
		t.Errorf("connect with no configuration: %v, want ErrUnavailable", err)
	}
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(t.TempDir(), "dead.kubeconfig")
	if err := os.WriteFile(dead, []byte(replacePort(string(b))), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Connect(ctx, kube.ConnectOptions{Kubeconfig: dead, PingTimeout: 2 * time.Second}); !errors.Is(err, transports.ErrUnavailable) {
		t.Errorf("connect to a port nobody listens on: %v, want ErrUnavailable", err)
	}
}

// replacePort points a kubeconfig's server at port 1 of loopback.
func replacePort(kc string) string {
	var out []string
	for _, l := range strings.Split(kc, "\n") {
		if i := strings.Index(l, "https://127.0.0.1:"); i >= 0 {
			j := i + len("https://127.0.0.1:")
			k := j
			for k < len(l) && l[k] >= '0' && l[k] <= '9' {
				k++
			}
			l = l[:j] + "1" + l[k:]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// TestLocalNode: the test cluster's one node is this machine.
func TestLocalNode(t *testing.T) {
	c := kubetest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := kube.LocalNode(ctx, client(t, c))
	if err != nil || got != c.Node {
		t.Fatalf("LocalNode: %q, %v; want %q", got, err, c.Node)
	}
}
