package settings

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// helperEnv makes the test binary a writer process (see writerMain) instead of running
// tests: two such processes setting keys at once check the lock across processes.
const helperEnv = "KENNEL_SETTINGS_TEST_WRITER"

func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(writerMain(spec))
	}
	os.Exit(m.Run())
}

// writerSpec is what a writer process does: n sets of distinct keys in file.
type writerSpec struct {
	File    string `json:"file"`
	Project bool   `json:"project"`
	Prefix  string `json:"prefix"`
	N       int    `json:"n"`
}

// writerMain sets kernelTransport.docker.<prefix><i> = i for i < n.
func writerMain(spec string) int {
	var w writerSpec
	if err := json.Unmarshal([]byte(spec), &w); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := Doc{Path: w.File, Project: w.Project}
	for i := range w.N {
		if err := d.Set(ctx, "kernelTransport.docker."+w.Prefix+strconv.Itoa(i), json.RawMessage(strconv.Itoa(i))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
