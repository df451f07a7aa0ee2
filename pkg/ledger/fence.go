package ledger

import "errors"

var ErrFenced = errors.New("ledger: fenced: a later owner holds the partition")
