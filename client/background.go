package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kennel-dev/kennel/api"
)

// ReadCell reads cell of session id (its id, or its job's) without waiting: the reply
// its request would have had once it ended (state "settled"), else state "running" with
// its output so far.
func (c *Client) ReadCell(ctx context.Context, id, cell string) (*api.CellReply, error) {
	return call[api.CellReply](ctx, c, "GET", "/sessions/"+url.PathEscape(id)+"/cells/"+url.PathEscape(cell), nil, nil, http.StatusOK)
}

// Events follows session id's event stream (GET /sessions/{id}/events): each event goes
// to onEvent as it comes, on the calling goroutine, until onEvent returns false, ctx
// ends (its error is returned) or the stream ends (the session ended: nil).
func (c *Client) Events(ctx context.Context, id string, onEvent func(api.SessionEvent) bool) error {
	path := "/sessions/" + url.PathEscape(id) + "/events"
	resp, err := c.send(ctx, "GET", path, http.Header{"Accept": {api.MediaNDJSON}}, nil, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev api.SessionEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("GET %s: bad event: %w", path, err)
		}
		if !onEvent(ev) {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
