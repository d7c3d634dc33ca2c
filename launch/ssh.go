package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports/ssh"
)

// Hosts returns the ssh connections and probe cache the Kit's ssh sessions share,
// making them (reading the ssh config, connecting nowhere) on first use. It fails with
// an error matching ssh.ErrUnreachable once the Kit is closed, and with NewHosts's error
// when Options.Hosts cannot be used. The Hosts stays the Kit's: the caller must not
// Close it.
func (k *Kit) Hosts() (*ssh.Hosts, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("ssh: kit closed: %w", ssh.ErrUnreachable)
	}
	if k.hosts == nil {
		h, err := ssh.NewHosts(k.opts.Hosts)
		if err != nil {
			return nil, err
		}
		k.hosts = h
	}
	return k.hosts, nil
}

func (k *Kit) ssh(ctx context.Context, spec *sessionspec.Transport, p *Parts) error {
	hosts, err := k.Hosts()
	if err != nil {
		return err
	}
	target := spec.SSH.Target
	probe := hosts.Probe(ctx, target)
	if probe.Status != ssh.StatusReady {
		return fmt.Errorf("ssh %s: %w", target, probe.Err)
	}
	dir := cmp.Or(spec.SSH.Dir, probe.Home)
	var handler controller.HostHandler
	fs, err := hosts.OpenFS(ctx, target+":"+dir, ssh.FSOptions{})
	switch {
	case errors.Is(err, ssh.ErrNoSFTP):
		// Cells run all the same; fs.* requests say why they cannot.
		handler = ssh.NoSFTP{Host: target}
		p.Warnings = append(p.Warnings, fmt.Sprintf("remote workspace %s:%s: %v: fs.* requests will answer unavailable", target, dir, err))
	case err != nil:
		return fmt.Errorf("remote workspace %s:%s: %w", target, dir, err)
	default:
		p.release = append(p.release, func() { _ = fs.Close() })
		handler = fs
	}
	o := k.opts.SSH
	o.Target = target
	p.Transport = ssh.New(hosts, o)
	p.Dir, p.Remote, p.SandboxDir, p.Handler, p.Python = dir, true, dir, handler, spec.Python
	return nil
}
