package workspaces

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestTmpRemoveSpeed(t *testing.T) {
	dir := t.TempDir()
	for i, how := range []string{"mine", "rm", "goall", "mine", "rm", "goall"} {
		p := filepath.Join(dir, how+string(rune('0'+i)))
		writeMany(t, p, 20000)
		unix.Sync()
		start := time.Now()
		switch how {
		case "mine":
			if err := removeTree(p); err != nil {
				t.Fatal(err)
			}
		case "rm":
			exec.Command("rm", "-rf", p).Run()
		case "goall":
			os.RemoveAll(p)
		}
		t.Logf("%s %v", how, time.Since(start))
	}
}
