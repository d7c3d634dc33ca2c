package docker

import (
	"context"

	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// ExecProcForTest runs argv as an exec in container the way the bridges of exec-mode
// detached kernels run.
func ExecProcForTest(t *Transport, container string, argv []string) (kernelstart.Proc, error) {
	return t.execRunner(container, nil)(context.Background(), argv, nil)
}
