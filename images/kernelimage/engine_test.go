package kernelimage_test

import (
	"context"
	"os"
	"testing"

	"github.com/moby/moby/client"
)

// engine returns a client of the machine's Docker Engine, or skips (fails under CI=true)
// when there is none.
func engine(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5e9)
		defer cancel()
		if _, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err == nil {
			t.Cleanup(func() { cli.Close() })
			return cli
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("docker engine needed under CI=true: %v", err)
	}
	t.Skipf("no docker engine: %v", err)
	return nil
}
