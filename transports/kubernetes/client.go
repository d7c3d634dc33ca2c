package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// DefaultPingTimeout bounds Connect's first contact with the API server when
// ConnectOptions.PingTimeout is zero.
const DefaultPingTimeout = 5 * time.Second

// Client-side rate limits of a Client's API calls when its rest.Config sets none
// (client-go's own defaults, 5 and 10, would make 20 concurrent starts wait on each other).
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// ConnectOptions say which cluster Connect reaches.
type ConnectOptions struct {
	// Kubeconfig is a kubeconfig file. Empty means client-go's loading rules: the files
	// KUBECONFIG names, else ~/.kube/config, else the in-cluster configuration of a
	// controller running in a pod (its service account).
	Kubeconfig string
	// Context is the kubeconfig context. Empty means its current context.
	Context string
	// PingTimeout bounds the version call that checks the API server answers. Zero means
	// DefaultPingTimeout; negative means ctx alone bounds it.
	PingTimeout time.Duration
}

// Client is a connection to one cluster's API server: its REST configuration (the exec
// streams are made from it), a clientset, and the default namespace of its configuration.
// It holds no goroutine and needs no Close; it is safe for concurrent use.
type Client struct {
	config    *rest.Config
	clientset k8s.Interface
	namespace string
	only      string // tests: "spdy" or "websocket", the exec streams' one protocol
}

// NewClient returns a Client of cfg, whose default namespace is namespace ("" means
// "default"). It contacts nothing. cfg is copied; a copy with no rate limits of its own
// gets DefaultQPS and DefaultBurst.
func NewClient(cfg *rest.Config, namespace string) (*Client, error) {
	if cfg == nil {
		return nil, &transports.FieldError{Field: "cfg", Reason: "no REST configuration"}
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{config: cfg, clientset: cs, namespace: cmp.Or(namespace, "default")}, nil
}

// Connect loads the configuration o names and returns a Client once the API server
// answered a version call. No configuration found, or a server that cannot be reached in
// time, is an error matching transports.ErrUnavailable; a configuration that does not
// parse is an error naming its file.
func Connect(ctx context.Context, o ConnectOptions) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, fmt.Errorf("kubernetes: no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a pod: %w", transports.ErrUnavailable)
		}
		return nil, fmt.Errorf("kubernetes: load kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig namespace: %w", err)
	}
	c, err := NewClient(cfg, ns)
	if err != nil {
		return nil, err
	}
	pctx, cancel := limits.Context(ctx, o.PingTimeout, DefaultPingTimeout)
	defer cancel()
	if err := c.clientset.Discovery().RESTClient().Get().AbsPath("/version").Do(pctx).Error(); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, fmt.Errorf("kubernetes %s: %w", cfg.Host, cause)
		}
		return nil, fmt.Errorf("kubernetes %s: %w", cfg.Host, classify(err))
	}
	return c, nil
}

// Config is the client's REST configuration (a copy of what it was made from); the caller
// must not change it.
func (c *Client) Config() *rest.Config { return c.config }

// Clientset is the client's typed clientset.
func (c *Client) Clientset() k8s.Interface { return c.clientset }

// Namespace is the default namespace of the client's configuration.
func (c *Client) Namespace() string { return c.namespace }

// classify marks API errors that mean "cannot run here now" as transports.ErrUnavailable
// (a server out of reach, overloaded or timing out, a namespace or object that is not
// there), and leaves the rest (refusals: forbidden, invalid) as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ne net.Error
	switch {
	case apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err), apierrors.IsNotFound(err),
		errors.As(err, &ne), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
	}
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		// Not an answer of the server: the connection failed.
		return fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
	}
	return err
}

// LocalNode returns the name of the cluster's node that is this machine: the node whose
// name is this host's name, or one of whose addresses (InternalIP, ExternalIP, Hostname)
// is an address of this host's interfaces. It is the Options.Node of a controller whose
// Mounts are its own directories. A cluster with no such node is an error matching
// errdefs.ErrNotFound.
func LocalNode(ctx context.Context, c *Client) (string, error) {
	host, _ := os.Hostname()
	local := map[string]bool{}
	if host != "" {
		local[host] = true
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				local[ipn.IP.String()] = true
			}
		}
	}
	nodes, err := c.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list nodes: %w", classify(err))
	}
	for _, n := range nodes.Items {
		if local[n.Name] {
			return n.Name, nil
		}
		for _, a := range n.Status.Addresses {
			if local[a.Address] {
				return n.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no node of the cluster's %d is this machine (%s): %w", len(nodes.Items), host, errdefs.ErrNotFound)
}
