package ssh

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// Target is a host as kennel reaches it: what the operator named, resolved through the
// ssh config file.
type Target struct {
	// Name is the host as given (an alias the config may know), without user or port.
	Name string
	// User is the login user: the target's, else the config's User, else the local user.
	User string
	// HostName is the address dialled: the config's HostName (with %h replaced), else Name.
	HostName string
	// Port is the target's port, else the config's Port, else 22.
	Port int
	// IdentityFiles are the private keys tried after the agent's, "~" expanded: the
	// config's IdentityFile entries, else the usual defaults that exist.
	IdentityFiles []string
	// Jump is the ProxyJump chain, outermost first, each resolved the same way; empty for
	// a direct connection.
	Jump []Target
}

// Addr is "HostName:Port", as dialled and as looked up in known_hosts.
func (t Target) Addr() string { return net.JoinHostPort(t.HostName, strconv.Itoa(t.Port)) }

// Key is the pool key: user, address and the jump chain. Two targets with the same Key
// share one connection.
func (t Target) Key() string {
	k := t.User + "@" + t.Addr()
	for i := len(t.Jump) - 1; i >= 0; i-- {
		k += " via " + t.Jump[i].Key()
	}
	return k
}

// String is "user@host:port" as the operator named it.
func (t Target) String() string {
	return t.User + "@" + net.JoinHostPort(t.Name, strconv.Itoa(t.Port))
}

// ParseTarget splits "[user@]host[:port]" (an IPv6 host in brackets). Port 0 means none
// was given. A host that is empty, starts with "-", or holds whitespace, a slash or a
// control character is refused with ErrInvalidTarget.
func ParseTarget(s string) (userName, host string, port int, err error) {
	fail := func(why string) (string, string, int, error) {
		return "", "", 0, fmt.Errorf("parse target %q: %s: %w", s, why, ErrInvalidTarget)
	}
	rest := s
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		userName, rest = rest[:i], rest[i+1:]
		if userName == "" || strings.HasPrefix(userName, "-") || strings.ContainsAny(userName, "@:/ \t\r\n") || hasControl(userName) {
			return fail("bad user")
		}
	}
	host = rest
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return fail("unclosed [")
		}
		host, rest = rest[1:end], rest[end+1:]
		if rest != "" && !strings.HasPrefix(rest, ":") {
			return fail("text after ]")
		}
		if rest != "" {
			rest = rest[1:]
			if port, err = parsePort(rest); err != nil {
				return fail(err.Error())
			}
		}
	} else if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		if strings.Count(rest, ":") > 1 {
			return fail("an IPv6 address needs brackets")
		}
		host = rest[:i]
		if port, err = parsePort(rest[i+1:]); err != nil {
			return fail(err.Error())
		}
	}
	if host == "" || strings.HasPrefix(host, "-") || strings.ContainsAny(host, "@/ \t\r\n[]") || hasControl(host) {
		return fail("bad host")
	}
	return userName, host, port, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// resolver resolves targets through one ssh config.
type resolver struct {
	cfg  *ssh_config.Config // nil: no config file
	home string
}

func newResolver(configFile string) (*resolver, error) {
	home, _ := os.UserHomeDir()
	r := &resolver{home: home}
	if configFile == "" && home != "" {
		configFile = filepath.Join(home, ".ssh", "config")
	}
	if configFile == "none" || configFile == "" {
		return r, nil
	}
	f, err := os.Open(configFile)
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ssh config %s: %w", configFile, err)
	}
	defer f.Close()
	cfg, err := ssh_config.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("parse ssh config %s: %w", configFile, err)
	}
	r.cfg = cfg
	return r, nil
}

func (r *resolver) get(alias, key string) string {
	if r.cfg == nil {
		return ""
	}
	v, err := r.cfg.Get(alias, key)
	if err != nil {
		return ""
	}
	return v
}

func (r *resolver) getAll(alias, key string) []string {
	if r.cfg == nil {
		return nil
	}
	v, err := r.cfg.GetAll(alias, key)
	if err != nil {
		return nil
	}
	return v
}

// maxJumps bounds a ProxyJump chain (and a config that makes one loop).
const maxJumps = 4

// resolve resolves "[user@]host[:port]".
func (r *resolver) resolve(s string) (Target, error) { return r.resolveDepth(s, 0) }

func (r *resolver) resolveDepth(s string, depth int) (Target, error) {
	if depth > maxJumps {
		return Target{}, fmt.Errorf("resolve target %q: ProxyJump chain longer than %d: %w", s, maxJumps, ErrInvalidTarget)
	}
	u, host, port, err := ParseTarget(s)
	if err != nil {
		return Target{}, err
	}
	t := Target{Name: host, User: cmp.Or(u, r.get(host, "User")), Port: port}
	if t.User == "" {
		if cur, err := user.Current(); err == nil {
			t.User = cur.Username
		} else {
			t.User = os.Getenv("USER")
		}
	}
	if t.Port == 0 {
		if p := r.get(host, "Port"); p != "" {
			if t.Port, err = parsePort(p); err != nil {
				return Target{}, fmt.Errorf("resolve target %q: config Port: %v: %w", s, err, ErrInvalidTarget)
			}
		}
	}
	t.Port = cmp.Or(t.Port, 22)
	t.HostName = host
	if hn := r.get(host, "HostName"); hn != "" {
		t.HostName = strings.ReplaceAll(hn, "%h", host)
	}
	for _, f := range r.getAll(host, "IdentityFile") {
		t.IdentityFiles = append(t.IdentityFiles, r.expand(f, t))
	}
	if len(t.IdentityFiles) == 0 && r.home != "" {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			p := filepath.Join(r.home, ".ssh", n)
			if _, err := os.Stat(p); err == nil {
				t.IdentityFiles = append(t.IdentityFiles, p)
			}
		}
	}
	if j := r.get(host, "ProxyJump"); j != "" && !strings.EqualFold(j, "none") {
		for _, hop := range strings.Split(j, ",") {
			hop = strings.TrimPrefix(strings.TrimSpace(hop), "ssh://")
			jt, err := r.resolveDepth(hop, depth+1+len(t.Jump))
			if err != nil {
				return Target{}, fmt.Errorf("resolve ProxyJump of %q: %w", s, err)
			}
			// A hop's own jumps come before it.
			t.Jump = append(t.Jump, jt.Jump...)
			jt.Jump = nil
			t.Jump = append(t.Jump, jt)
		}
		if len(t.Jump) > maxJumps {
			return Target{}, fmt.Errorf("resolve target %q: ProxyJump chain longer than %d: %w", s, maxJumps, ErrInvalidTarget)
		}
	}
	return t, nil
}

// expand replaces a leading "~/" and the tokens %d (home), %u (user), %h (host name),
// %r (remote user) and %% in an IdentityFile entry.
func (r *resolver) expand(p string, t Target) string {
	if strings.HasPrefix(p, "~/") {
		p = filepath.Join(r.home, p[2:])
	}
	local := os.Getenv("USER")
	return strings.NewReplacer("%d", r.home, "%u", local, "%h", t.HostName, "%r", t.User, "%%", "%").Replace(p)
}
