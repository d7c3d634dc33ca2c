package ssh

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ConnectTimeout bounds a connection's TCP connect and ssh handshake.
const ConnectTimeout = 10 * time.Second

// dialer makes authenticated ssh connections for a Hosts.
type dialer struct {
	opts   HostsOptions
	khMu   sync.Mutex // serialises reads and appends of the known_hosts file
	jumpTo func(ctx context.Context, t Target) (*xssh.Client, error)
}

// authFailure collects what the client could offer, to explain a refusal.
type authFailure struct {
	passphrase []string // identity files that need a passphrase
	agent      bool     // an agent was asked
	keys       int      // keys offered
}

// authMethods returns the agent's keys, then the identity files' keys.
func (d *dialer) authMethods(t Target) ([]xssh.AuthMethod, *authFailure, func()) {
	var methods []xssh.AuthMethod
	var signers []xssh.Signer
	af := &authFailure{}
	closeAgent := func() {}
	sock := cmp.Or(d.opts.AgentSocket, os.Getenv("SSH_AUTH_SOCK"))
	if sock != "" && sock != "none" {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			ag := agent.NewClient(c)
			if s, err := ag.Signers(); err == nil {
				signers = append(signers, s...)
				af.agent = true
			}
			closeAgent = func() { c.Close() }
		}
	}
	for _, f := range t.IdentityFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s, err := xssh.ParsePrivateKey(b)
		var pm *xssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			af.passphrase = append(af.passphrase, f)
		case err == nil:
			signers = append(signers, s)
		}
	}
	af.keys = len(signers)
	if len(signers) > 0 {
		methods = append(methods, xssh.PublicKeys(signers...))
	}
	return methods, af, closeAgent
}

// dummyKey is a key no host has: asking known_hosts about it lists the keys it holds.
var dummyKey, _ = xssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))

func (d *dialer) knownHostsFile() string {
	home, _ := os.UserHomeDir()
	return cmp.Or(d.opts.KnownHosts, filepath.Join(home, ".ssh", "known_hosts"))
}

// hostKeys returns the host key callback (accept-new unless StrictHostKeys) and the
// algorithms of the keys known_hosts already holds for addr, so the handshake asks for
// a key that can be checked rather than one that merely differs.
func (d *dialer) hostKeys(addr string) (xssh.HostKeyCallback, []string, error) {
	file := d.knownHostsFile()
	d.khMu.Lock()
	if _, err := os.Stat(file); os.IsNotExist(err) && !d.opts.StrictHostKeys {
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err == nil {
			if f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				f.Close()
			}
		}
	}
	check, err := knownhosts.New(file)
	d.khMu.Unlock()
	if err != nil && !os.IsNotExist(err) {
		return nil, nil, fmt.Errorf("read known_hosts %s: %w", file, err)
	}
	if check == nil {
		check = func(string, net.Addr, xssh.PublicKey) error { return &knownhosts.KeyError{} }
	}
	var algos []string
	var ke *knownhosts.KeyError
	if err := check(addr, &net.TCPAddr{}, dummyKey); errors.As(err, &ke) {
		for _, k := range ke.Want {
			algos = append(algos, algorithmsFor(k.Key.Type())...)
		}
	}
	cb := func(hostname string, remote net.Addr, key xssh.PublicKey) error {
		err := check(hostname, remote, key)
		var ke *knownhosts.KeyError
		if err == nil || !errors.As(err, &ke) {
			return err
		}
		if len(ke.Want) > 0 {
			w := ke.Want[0]
			return fmt.Errorf("the %s host key of %s is not the one %s holds at line %d: if the host was reinstalled, remove the old key (ssh-keygen -R %s -f %s) and connect again: %w",
				key.Type(), addr, w.Filename, w.Line, knownhosts.Normalize(addr), w.Filename, ErrHostKeyChanged)
		}
		if d.opts.StrictHostKeys {
			return fmt.Errorf("the host key of %s (%s %s) is not in %s: check it and add it (ssh-keyscan, or ssh once by hand): %w",
				addr, key.Type(), xssh.FingerprintSHA256(key), file, ErrNeedsAuth)
		}
		// accept-new: an unknown host is added.
		d.khMu.Lock()
		defer d.khMu.Unlock()
		f, ferr := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if ferr == nil {
			defer f.Close()
			_, ferr = f.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n")
		}
		if ferr != nil {
			return fmt.Errorf("add host key of %s to %s: %w", addr, file, ferr)
		}
		return nil
	}
	return cb, algos, nil
}

func algorithmsFor(keyType string) []string {
	switch keyType {
	case xssh.KeyAlgoRSA:
		return []string{xssh.KeyAlgoRSASHA512, xssh.KeyAlgoRSASHA256, xssh.KeyAlgoRSA}
	case xssh.CertAlgoRSAv01:
		return []string{xssh.CertAlgoRSASHA512v01, xssh.CertAlgoRSASHA256v01, xssh.CertAlgoRSAv01}
	}
	return []string{keyType}
}

// dial connects to t (through its jump hosts) and authenticates. ctx bounds it, and so
// does ConnectTimeout.
func (d *dialer) dial(ctx context.Context, t Target) (*xssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	addr := t.Addr()
	hostKey, algos, err := d.hostKeys(addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w: %w", t, err, ErrNeedsAuth)
	}
	methods, af, closeAgent := d.authMethods(t)
	defer closeAgent()
	cfg := &xssh.ClientConfig{
		User:              t.User,
		Auth:              methods,
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: algos,
		Timeout:           ConnectTimeout,
	}
	var conn net.Conn
	if len(t.Jump) > 0 {
		jump := t.Jump[len(t.Jump)-1]
		jump.Jump = t.Jump[:len(t.Jump)-1]
		jc, err := d.jumpTo(ctx, jump)
		if err != nil {
			return nil, fmt.Errorf("connect %s through %s: %w", t, jump, err)
		}
		if conn, err = jc.DialContext(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("connect %s through %s: %w: %w", t, jump, dialCause(ctx, err), ErrUnreachable)
		}
	} else {
		nd := net.Dialer{KeepAlive: 30 * time.Second}
		if conn, err = nd.DialContext(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("connect %s: %w: %w", t, dialCause(ctx, err), ErrUnreachable)
		}
	}
	// The handshake ends with ctx: a deadline, and a close when ctx is cancelled.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	c, chans, reqs, err := xssh.NewClientConn(conn, addr, cfg)
	cancelled := !stop()
	if err != nil {
		conn.Close()
		return nil, classifyHandshake(t, err, af, cancelled, context.Cause(ctx))
	}
	if cancelled {
		c.Close()
		return nil, fmt.Errorf("connect %s: %w: %w", t, context.Cause(ctx), ErrUnreachable)
	}
	_ = conn.SetDeadline(time.Time{})
	return xssh.NewClient(c, chans, reqs), nil
}

// dialCause is why a dial failed: ctx's cause when ctx ended it (the Hosts closed, a
// deadline), which the dial's own "operation was canceled" does not say.
func dialCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil {
			return fmt.Errorf("%w (%v)", cause, err)
		}
	}
	return err
}

// classifyHandshake names why a handshake failed: ErrNeedsAuth when a person could get
// in (refused keys, a passphrase, a host key), else ErrUnreachable.
func classifyHandshake(t Target, err error, af *authFailure, cancelled bool, cause error) error {
	if errors.Is(err, ErrNeedsAuth) {
		return fmt.Errorf("connect %s: %w", t, err)
	}
	if cancelled {
		return fmt.Errorf("connect %s: %w: %w", t, cause, ErrUnreachable)
	}
	msg := err.Error()
	if strings.Contains(msg, "unable to authenticate") || strings.Contains(msg, "no supported methods remain") {
		hint := fmt.Sprintf("the server refused the %d key(s) offered", af.keys)
		if !af.agent {
			hint += "; no ssh agent was reachable (SSH_AUTH_SOCK)"
		}
		if len(af.passphrase) > 0 {
			hint += fmt.Sprintf("; %s need a passphrase: add them to the agent (ssh-add %s)", strings.Join(af.passphrase, ", "), af.passphrase[0])
		} else {
			hint += fmt.Sprintf("; sign in once by hand (%s) or add a key to the agent", SignIn(t.String()))
		}
		return fmt.Errorf("connect %s: %s: %w: %w", t, hint, err, ErrNeedsAuth)
	}
	return fmt.Errorf("connect %s: %w: %w", t, err, ErrUnreachable)
}
