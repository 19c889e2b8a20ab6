package mysqloutbox

import (
	"context"
	"errors"
	"fmt"
)

// mapErr is a stand-in for the core part's error mapping (errors.go).
func mapErr(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("mysqloutbox: %s: %w", op, err)
}
