package settings

import (
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the name of a settings document.
const FileName = "settings.json"

// ProjectDirName is the directory of a project's settings, below the project's root.
const ProjectDirName = ".kennel"

// EnvConfigDir names the global config directory when set (an absolute path).
const EnvConfigDir = "KENNEL_CONFIG_DIR"

// GlobalDir returns the global config directory: $KENNEL_CONFIG_DIR, else
// $XDG_CONFIG_HOME/kennel, else ~/.config/kennel. A relative KENNEL_CONFIG_DIR is an
// error; a relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
func GlobalDir() (string, error) {
	if d := os.Getenv(EnvConfigDir); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("global config dir: %s=%q is not an absolute path", EnvConfigDir, d)
		}
		return filepath.Clean(d), nil
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "kennel"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("global config dir: %w", err)
	}
	return filepath.Join(home, ".config", "kennel"), nil
}

// GlobalFile returns the global settings file: GlobalDir()/settings.json.
func GlobalFile() (string, error) {
	d, err := GlobalDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, FileName), nil
}

// ProjectFile returns the settings file of the project at dir: dir/.kennel/settings.json,
// with dir made absolute.
func ProjectFile(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("project settings %q: %w", dir, err)
	}
	return filepath.Join(abs, ProjectDirName, FileName), nil
}
