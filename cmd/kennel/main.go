// Command kennel is the sandbox controller's one binary: it runs Python kernels behind a
// transport, gates their frames and serves their host requests.
//
//	kennel run -c 'x = 6*7' -c 'print(x)'   # cells in a local kernel
//	kennel version
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kennel-dev/kennel/internal/reaper"
)

func main() {
	// In reaper mode (the local transport re-executes this binary to supervise a kernel)
	// this never returns.
	reaper.Main()

	ctx, stop := withSignals(context.Background())
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitError carries a process exit code out of a command; its message, if any, was printed.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "kennel: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "kennel: "+err.Error())
	return 1
}
