package kubernetes

import (
	"context"
	"net"
)

// ExecInPod runs argv as an exec in pod of t's namespace: its stdin and stdout as a
// net.Conn (Close ends the stream), and a wait for its exit status.
func ExecInPod(t *Transport, pod string, argv []string) (net.Conn, func(context.Context) (int, error), error) {
	s, err := t.cli.startExec(t.ns, pod, argv, nil)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Exit, nil
}

// UseOnly makes c's exec streams use one protocol alone, "spdy" (the WebSocket's
// fallback) or "websocket" (no fallback).
func UseOnly(c *Client, protocol string) { c.only = protocol }
