package ssh

// StageCommand is the staging command line, for tests that drive it by hand.
func StageCommand() string { return loginCommand(stageScript) }

// BundleTar is bundleTar, for tests.
var BundleTar = bundleTar
