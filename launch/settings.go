package launch

import (
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/settings"
)

// FromSettings reads the settings of the project at dir (the global ones only when dir is
// "") and returns the transport their kernelTransport gives (nil: a local kernel) with
// the result read. It fails closed (settings.Result.KernelTransport): a settings file
// that could set the transport and cannot be read, or a unit with a bad field, is an error
// and no kernel may start.
func FromSettings(dir string) (*sessionspec.Transport, *settings.Result, error) {
	r, err := settings.Load(settings.LoadOptions{ProjectDir: dir})
	if err != nil {
		return nil, nil, err
	}
	kt, err := r.KernelTransport()
	if err != nil {
		return nil, r, err
	}
	return kt, r, nil
}

// Problems are the result's problems, worded for the operator.
func Problems(r *settings.Result) []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.Problems))
	for _, p := range r.Problems {
		out = append(out, p.Error())
	}
	return out
}
