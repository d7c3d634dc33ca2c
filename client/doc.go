// Package client is a Go client of kennel's daemon API (package api) over its unix
// socket. Each call writes its HTTP/1.1 request and reads the reply on the calling
// goroutine, over a kept-alive connection that no other call uses meanwhile.
//
//	c := client.New(daemon.DefaultSocket(os.Getenv))
//	s, err := c.CreateSession(ctx, api.CreateSession{Cwd: "/home/me/project"}, client.CreateOptions{})
//	if err != nil {
//		return err // an *api.Error: errors.As, then decide on its Code
//	}
//	reply, err := c.RunCell(ctx, s.ID, api.RunCell{Code: "6*7"})
//	// reply.State == "settled", *reply.Cell.Result == "42"
package client
