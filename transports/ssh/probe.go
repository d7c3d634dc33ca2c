package ssh

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
)

// Status is a probe's verdict on a host.
type Status string

// The verdicts of a probe.
const (
	// StatusReady: the host runs kernels (python3 at least MinPython).
	StatusReady Status = "ready"
	// StatusUnsupported: the host answered but has no usable python3.
	StatusUnsupported Status = "unsupported"
	// StatusNeedsAuth: a person could get in (Hint says how); kennel cannot on its own.
	StatusNeedsAuth Status = "needs_auth"
	// StatusUnreachable: no ssh conversation could be had.
	StatusUnreachable Status = "unreachable"
)

// MinPython is the oldest python3 a host may have: older is StatusUnsupported.
var MinPython = [2]int{3, 9}

// How long a probe's answer is reused: a ready (or unsupported) host for ReadyTTL, a
// failure for FailureTTL.
const (
	ReadyTTL   = 60 * time.Second
	FailureTTL = 5 * time.Second
)

// Probe is what a probe learnt about a host.
type Probe struct {
	// Target is the host as resolved ("user@host:port").
	Target string `json:"target"`
	// Status is the verdict; the fields below Hint are set when the host answered.
	Status Status `json:"status"`
	// Hint says, for any status but ready, what went wrong and what a person can do.
	Hint string `json:"hint,omitempty"`
	// OS and Arch are the host's `uname -s` and `uname -m`.
	OS   string `json:"os,omitempty"`
	Arch string `json:"arch,omitempty"`
	// Home is the login user's home directory on the host.
	Home string `json:"home,omitempty"`
	// Cores is the number of online processors (0 when unknown).
	Cores int `json:"cores,omitempty"`
	// Python is python3's version ("3.11.2"), "" when there is none; PythonPath is the
	// interpreter's absolute path (its sys.executable), used to start kernels.
	Python     string `json:"python,omitempty"`
	PythonPath string `json:"python_path,omitempty"`
	// Bundle is the stub bundle hash asked about; Staged reports that
	// ~/.kennel-remote/<Bundle>/ exists on the host (a complete bundle).
	Bundle string `json:"bundle,omitempty"`
	Staged bool   `json:"staged"`
	// At is when the probe ran.
	At time.Time `json:"at"`
	// Err is the error behind a status other than ready (it matches ErrNeedsAuth,
	// ErrUnreachable or ErrUnsupported).
	Err error `json:"-"`
}

// MaxCachedProbes bounds the probe cache of a Hosts: a probe that finds it full evicts
// the answer probed least recently. An expired answer is dropped when it is next looked
// up, so a host probed once and never again holds an entry until MaxCachedProbes others
// push it out.
const MaxCachedProbes = 1024

// probeCache is a Hosts' answers by probeKey, least recently probed first. Its user
// holds the lock that guards it (Hosts.probeMu).
type probeCache struct {
	byKey map[string]*list.Element // of *cachedProbe
	order list.List                // least recently probed at the front
}

type cachedProbe struct {
	key     string
	p       Probe
	expires time.Time
}

// get returns the answer for key while it is fresh at now; an expired one is dropped.
func (c *probeCache) get(key string, now time.Time) (Probe, bool) {
	e, ok := c.byKey[key]
	if !ok {
		return Probe{}, false
	}
	cp := e.Value.(*cachedProbe)
	if !now.Before(cp.expires) {
		c.order.Remove(e)
		delete(c.byKey, key)
		return Probe{}, false
	}
	return cp.p, true
}

// put records p for key until expires, as the most recently probed answer, and evicts
// the least recently probed ones beyond the bound.
func (c *probeCache) put(key string, p Probe, expires time.Time) {
	if c.byKey == nil {
		c.byKey = map[string]*list.Element{}
	}
	if e, ok := c.byKey[key]; ok {
		c.order.Remove(e)
	}
	c.byKey[key] = c.order.PushBack(&cachedProbe{key: key, p: p, expires: expires})
	for c.order.Len() > MaxCachedProbes {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*cachedProbe).key)
	}
}

// markStaged records that the answer for key, if one is held, has its bundle staged.
func (c *probeCache) markStaged(key string) {
	if e, ok := c.byKey[key]; ok {
		e.Value.(*cachedProbe).p.Staged = true
	}
}

// probeKey is the cache key of a probe of t for bundle.
func probeKey(t Target, bundle string) string { return t.Key() + " " + bundle }

// probeScript is the probe's fixed command. Its stdin holds the interpreter's name and
// the bundle hash, one a line; it prints key=value lines.
const probeScript = `IFS= read -r py || exit 2
IFS= read -r h || exit 2
case "$h" in ""|*[!0-9a-f]*) h=-;; esac
printf 'os=%s\n' "$(uname -s)"
printf 'arch=%s\n' "$(uname -m)"
printf 'home=%s\n' "$HOME"
printf 'cores=%s\n' "$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null)"
v=$("$py" -I -S -c 'import sys;print("%d.%d.%d %s" % (sys.version_info[:3] + (sys.executable,)))' 2>/dev/null </dev/null) || v=
printf 'python=%s\n' "$v"
if [ -d "$HOME/.kennel-remote/$h" ]; then echo staged=1; else echo staged=0; fi
`

// Probe answers what target is: os, arch, home, cores, python3 and whether the embedded
// stub bundle is staged there, over one remote command on the shared connection.
// Answers are cached (ReadyTTL, FailureTTL; at most MaxCachedProbes hosts); a caller
// arriving while a probe of the same host runs joins it. The probe is every joined
// caller's: one caller's ctx ending returns that caller's Probe at once (unreachable,
// naming the cause) while the probe goes on for the others, within 2 × ConnectTimeout,
// or until Close. Probe never fails: a host it cannot use has a Status other than
// ready, with Hint and Err. A target that does not parse is StatusUnreachable with an
// ErrInvalidTarget error.
func (h *Hosts) Probe(ctx context.Context, target string) Probe {
	b, err := images.Stub()
	if err != nil {
		return Probe{Target: target, Status: StatusUnreachable, Hint: err.Error(), Err: err, At: h.now()}
	}
	return h.probeBundle(ctx, target, b.Hash())
}

// Cached returns the answer Probe would give for target now without reaching the host:
// the last probe's, while it is fresh (ReadyTTL, FailureTTL), of the embedded stub
// bundle, with target resolved through the ssh config as Probe resolves it (so an alias
// and the user@host:port it names share one answer). It never connects and never waits
// for a probe in flight. It reports false when no fresh answer is held, and for a
// target that does not parse.
func (h *Hosts) Cached(target string) (Probe, bool) {
	b, err := images.Stub()
	if err != nil {
		return Probe{}, false
	}
	t, err := h.res.resolve(target)
	if err != nil {
		return Probe{}, false
	}
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	return h.cache.get(probeKey(t, b.Hash()), h.now())
}

func (h *Hosts) probeBundle(ctx context.Context, target, bundle string) Probe {
	t, err := h.res.resolve(target)
	if err != nil {
		return Probe{Target: target, Status: StatusUnreachable, Hint: err.Error(), Err: err, At: h.now()}
	}
	key := probeKey(t, bundle)
	h.probeMu.Lock()
	if p, ok := h.cache.get(key, h.now()); ok {
		h.probeMu.Unlock()
		return p
	}
	h.probeMu.Unlock()
	ch := h.probes.DoChan(key, func() (any, error) {
		pctx, cancel := h.detach(ctx, 2*ConnectTimeout)
		defer cancel()
		p := h.runProbe(pctx, t, bundle)
		ttl := ReadyTTL
		if p.Status == StatusNeedsAuth || p.Status == StatusUnreachable {
			ttl = FailureTTL
		}
		h.probeMu.Lock()
		h.cache.put(key, p, p.At.Add(ttl))
		h.probeMu.Unlock()
		return p, nil
	})
	select {
	case r := <-ch:
		return r.Val.(Probe)
	case <-ctx.Done():
		err := fmt.Errorf("probe %s: %w: %w", t, context.Cause(ctx), ErrUnreachable)
		return Probe{Target: t.String(), Status: StatusUnreachable, Hint: err.Error(), Err: err, At: h.now()}
	}
}

// markStaged records in the cache that bundle is now staged on t.
func (h *Hosts) markStaged(t Target, bundle string) {
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	h.cache.markStaged(probeKey(t, bundle))
}

func (h *Hosts) runProbe(ctx context.Context, t Target, bundle string) Probe {
	p := Probe{Target: t.String(), Bundle: bundle, At: h.now()}
	fail := func(err error) Probe {
		p.Err = err
		p.Hint = err.Error()
		p.Status = StatusUnreachable
		if errors.Is(err, ErrNeedsAuth) {
			p.Status = StatusNeedsAuth
		}
		return p
	}
	c, err := h.clientFor(ctx, t)
	if err != nil {
		return fail(err)
	}
	out, err := runRemote(ctx, c, "probe "+t.String(), probeScript,
		strings.NewReader(h.opts.Python+"\n"+bundle+"\n"), 64<<10)
	if err != nil {
		if errors.Is(err, ErrRemote) {
			err = fmt.Errorf("%w: %w", err, ErrUnreachable)
		}
		return fail(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "os":
			p.OS = v
		case "arch":
			p.Arch = v
		case "home":
			p.Home = v
		case "cores":
			p.Cores, _ = strconv.Atoi(strings.TrimSpace(v))
		case "python":
			p.Python, p.PythonPath, _ = strings.Cut(v, " ")
		case "staged":
			p.Staged = v == "1"
		}
	}
	if p.Home == "" || p.OS == "" {
		return fail(fmt.Errorf("probe %s: the host's answer lacks os or home: %w", t, ErrUnreachable))
	}
	if !pythonAtLeast(p.Python, MinPython) {
		p.Status = StatusUnsupported
		what := "no " + h.opts.Python
		if p.Python != "" {
			what = h.opts.Python + " " + p.Python
		}
		p.Err = fmt.Errorf("probe %s: %s on the host; kernels need python %d.%d or newer: %w", t, what, MinPython[0], MinPython[1], ErrUnsupported)
		p.Hint = p.Err.Error()
		return p
	}
	p.Status = StatusReady
	return p
}

// SignIn is the command line that signs in to target by hand, for a person to run where
// kennel runs: "ssh -p PORT user@host", with no -p for port 22 (or none given), and the
// destination quoted for a POSIX shell when it holds a character a shell treats
// specially. target is "[user@]host[:port]" (a Probe's Target); host is named as given,
// so ssh resolves it through the user's own ssh config. SignIn is "" for a target that
// does not parse (ParseTarget).
func SignIn(target string) string {
	user, host, port, err := ParseTarget(target)
	if err != nil {
		return ""
	}
	dest := host
	if user != "" {
		dest = user + "@" + host
	}
	cmd := "ssh"
	if port != 0 && port != 22 {
		cmd += " -p " + strconv.Itoa(port)
	}
	return cmd + " " + shellWord(dest)
}

// shellWord quotes s as one word of a POSIX shell: as it is when it holds only
// characters no shell treats specially, else in single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return shQuote(s)
}

// pythonAtLeast reports whether version "X.Y.Z" is at least min.
func pythonAtLeast(version string, min [2]int) bool {
	maj, rest, _ := strings.Cut(version, ".")
	mnr, _, _ := strings.Cut(rest, ".")
	x, err1 := strconv.Atoi(maj)
	y, err2 := strconv.Atoi(mnr)
	return err1 == nil && err2 == nil && (x > min[0] || x == min[0] && y >= min[1])
}
