// Package launch is the one session assembly: it turns a sessionspec.Transport (from the
// kernelTransport setting, `kennel run`'s flags or the API) and a working directory into
// a session's parts — the transport, the sandbox directory, the kernel's environment and
// the fs.* handler over the path map — that controller.Start takes. `kennel run`,
// `kennel serve` and the daemon's API all assemble through it, so each description
// starts exactly the transport it names, with that transport's lock-down, or is refused.
//
//	kit := launch.New(launch.Options{})
//	defer kit.Close()
//	parts, err := kit.Assemble(ctx, spec, dir) // spec nil: a local kernel
//	if err != nil {
//		return err
//	}
//	defer parts.Release()
//	s, err := controller.Start(ctx, parts.Apply(controller.Options{Bundle: hash}))
//
// FromSettings reads the transport the settings of a project give (nil: local), failing
// closed on a settings file that could set it and cannot be read.
package launch
