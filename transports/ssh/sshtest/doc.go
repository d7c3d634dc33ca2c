// Package sshtest starts a real OpenSSH sshd on 127.0.0.1 for tests: a throwaway host
// key and user key, its own sshd_config, and a lean home for the user it logs in.
//
// The user is root (tests run as root in CI). sshd takes a user's home and login shell
// from the password database, and root's real home runs pyenv init on every command
// (+600 ms), so the server runs in its own mount namespace (unshare --mount) with a copy
// of /etc/passwd bind-mounted over the real one, in which root's home is a fresh
// temporary directory and its shell /bin/bash. Nothing outside that namespace changes:
// no user is added, no file of the machine is written.
//
// The lean home's ~/.profile and ~/.bashrc print a banner to stdout, so every test that
// uses the server checks that a chatty login profile does not disturb what the client
// reads.
//
// Clients reach sshd through a counting TCP proxy (Server.Addr), so a test can tell how
// many connections were made (Server.Connections).
//
//	srv := sshtest.Start(t)
//	// srv.ConfigFile holds "Host kennel-test" with HostName, Port, User and IdentityFile;
//	// srv.KnownHosts already trusts the host key.
//	out := srv.Run(t, "ps -eo args") // a command over the system ssh client
package sshtest
