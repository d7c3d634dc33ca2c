package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/kennel-dev/kennel/api"
)

// Functions lists the @remote functions session id's kernel registered, by name (none
// when no kernel runs; the daemon starts none for it).
func (c *Client) Functions(ctx context.Context, id string) ([]api.Function, error) {
	var l api.FunctionList
	if err := c.request(ctx, "GET", "/sessions/"+url.PathEscape(id)+"/functions", nil, nil, &l, http.StatusOK); err != nil {
		return nil, err
	}
	return l.Functions, nil
}

// Call calls @remote function name of session id's kernel with req's keyword arguments
// and returns how the call ended: Status "ok" with its value, or "error" with the call's
// typed error (api.CallError: not_running, unreachable, unknown, timeout, failed), which
// is a reply, not an error of Call. An error means the request itself failed (no such
// session, a bad body, the daemon out of reach).
func (c *Client) Call(ctx context.Context, id, name string, req api.CallFunction) (*api.CallReply, error) {
	path := "/sessions/" + url.PathEscape(id) + "/functions/" + url.PathEscape(name)
	return call[api.CallReply](ctx, c, "POST", path, nil, req, http.StatusOK)
}
