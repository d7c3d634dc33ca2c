package main

import (
	"context"
	"fmt"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
)

// sshTransport returns the transport for `kennel run --ssh [user@]host[:port]` and a
// release function that closes the connection. It probes the host first, so a host that
// needs a sign-in or is out of reach fails here with the probe's hint
// (ssh.ErrNeedsAuth, ssh.ErrUnreachable, ssh.ErrUnsupported).
func sshTransport(ctx context.Context, target string) (transports.Transport, *ssh.Hosts, ssh.Probe, func(), error) {
	hosts, err := ssh.NewHosts(ssh.HostsOptions{})
	if err != nil {
		return nil, nil, ssh.Probe{}, nil, err
	}
	p := hosts.Probe(ctx, target)
	if p.Status != ssh.StatusReady {
		hosts.Close()
		return nil, nil, p, nil, p.Err
	}
	return ssh.New(hosts, ssh.Options{Target: target}), hosts, p, func() { hosts.Close() }, nil
}

// sshSession is the remote half of `kennel run --ssh TARGET [-C /remote/dir]`: the
// transport, the remote working directory (-C, else the login user's home) and the fs.*
// handler that serves that directory over SFTP on the same connection.
type sshSession struct {
	transport transports.Transport
	dir       string
	handler   *ssh.FS
	release   func()
}

func startSSH(ctx context.Context, target, dir string) (*sshSession, error) {
	tr, hosts, probe, release, err := sshTransport(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", target, err)
	}
	if dir == "" {
		dir = probe.Home
	}
	fs, err := hosts.OpenFS(ctx, target+":"+dir, ssh.FSOptions{})
	if err != nil {
		release()
		return nil, fmt.Errorf("remote workspace %s:%s: %w", target, dir, err)
	}
	return &sshSession{transport: tr, dir: dir, handler: fs, release: func() { _ = fs.Close(); release() }}, nil
}
