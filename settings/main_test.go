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

// freeformKey is a test-only key whose value is any object, so writers can set many
// distinct leaves of one document; it is declared only while withFreeformKey holds.
var freeformKey = &Key{
	ID: "testFreeform", Type: "object", Scope: ProjectAllowed, Default: json.RawMessage("null"), Doc: "test only",
	decode: func(n *node, ptr string, s *Settings, bad badFunc) {
		if n.kind != kObject {
			bad(ptr, typeErr("an object", n))
		}
	},
	copyTo: func(d, s *Settings) {},
	isSet:  func(s *Settings) bool { return false },
	value:  func(s *Settings) any { return nil },
}

// withFreeformKey declares freeformKey until the returned func runs.
func withFreeformKey() func() {
	saved := keys
	keys = append(append([]*Key(nil), keys...), freeformKey)
	return func() { keys = saved }
}

// writerMain sets testFreeform.<prefix><i> = i for i < n.
func writerMain(spec string) int {
	var w writerSpec
	if err := json.Unmarshal([]byte(spec), &w); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := Doc{Path: w.File, Project: w.Project}
	defer withFreeformKey()()
	for i := range w.N {
		if err := d.Set(ctx, freeformKey.ID+"."+w.Prefix+strconv.Itoa(i), json.RawMessage(strconv.Itoa(i))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
