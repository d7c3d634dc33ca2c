package local_test

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
)

// Start a kernel, read its hello, and end it. The binary must call reaper.Main first in
// main (see package internal/reaper).
func Example() {
	ctx := context.Background()
	tr := local.New(local.Options{})
	dir, _ := os.Getwd()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "example", Dir: dir})
	if err != nil {
		fmt.Println("no kernel:", err) // errors.Is(err, transports.ErrUnavailable) without python
		return
	}
	hello, _ := bufio.NewReader(k.Stdout()).ReadString('\n')
	fmt.Print(hello)
	_ = k.Kill(ctx) // close stdin, grace, TERM, grace, KILL: confirmed by the exit
	exit, _ := k.Wait()
	fmt.Println("killed:", exit.Killed)
}
