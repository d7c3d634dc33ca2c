package output

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Prune removes the spill files (kennel-spill-*) and artifacts (kennel-output-*) in dir
// whose modification time is more than maxAge ago (SpillKeep is the usual age), and
// returns how many it removed. It touches nothing else: not other names, not
// subdirectories, not symlinks. A missing dir prunes nothing. A controller calls it when
// it starts; files of running captures are written to, so they are never that old.
// Errors on single files are joined and the rest are still pruned.
func Prune(ctx context.Context, dir string, maxAge time.Duration) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune output %s: %w", dir, err)
	}
	cutoff := time.Now().Add(-maxAge)
	removed := 0
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("prune output %s: %w", dir, context.Cause(ctx)))
			break
		}
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasPrefix(name, "kennel-spill-") || strings.HasPrefix(name, "kennel-output-")) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("prune output %s: %w", name, err))
			continue
		}
		if !info.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("prune output %s: %w", name, err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
