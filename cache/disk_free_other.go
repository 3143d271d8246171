//go:build !(linux || darwin || freebsd)

package cache

import "errors"

// freeBytes is unknown here: the disk tier then uses its default budget and
// no free-space floor.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }
