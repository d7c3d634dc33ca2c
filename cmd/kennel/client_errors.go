package main

import (
	"errors"

	"github.com/kennel-dev/kennel/api"
)

// asAPI finds the API error in err's chain.
func asAPI(err error, target **api.Error) bool { return errors.As(err, target) }
