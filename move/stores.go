package move

import (
	"errors"
	"fmt"

	"github.com/outboxrelay/outbox"
)

// missing is the error of a store that lacks an optional interface.
func missing(s outbox.Store, iface, what string) error {
	return fmt.Errorf("move: the store %T does not implement %s, which a move needs to %s: this backend cannot take part in a move (the memory, Postgres and Redis backends can)", s, iface, what)
}

type source interface {
	outbox.Store
	outbox.Exporter
	outbox.Sealer
}

type destination interface {
	outbox.Store
	outbox.Importer
	outbox.Holder
	outbox.Looker
}

func asSource(s outbox.Store) (source, error) {
	if s == nil {
		return nil, errors.New("move: the source store is nil")
	}
	if _, ok := s.(outbox.Exporter); !ok {
		return nil, missing(s, "outbox.Exporter", "read and remove the source's entries")
	}
	if _, ok := s.(outbox.Sealer); !ok {
		return nil, missing(s, "outbox.Sealer", "seal the source")
	}
	if _, ok := s.(outbox.Inspector); !ok {
		return nil, missing(s, "outbox.Inspector", "count the source's entries")
	}
	return s.(source), nil
}

func asDestination(s outbox.Store) (destination, error) {
	if s == nil {
		return nil, errors.New("move: the destination store is nil")
	}
	if _, ok := s.(outbox.Importer); !ok {
		return nil, missing(s, "outbox.Importer", "add entries to the destination")
	}
	if _, ok := s.(outbox.Holder); !ok {
		return nil, missing(s, "outbox.Holder", "hold the destination's relays")
	}
	if _, ok := s.(outbox.Looker); !ok {
		return nil, missing(s, "outbox.Looker", "check entries the destination already holds")
	}
	if _, ok := s.(outbox.Inspector); !ok {
		return nil, missing(s, "outbox.Inspector", "count the destination's entries")
	}
	return s.(destination), nil
}

// pair checks the two stores and the options.
func pair(from, to outbox.Store, opts Options) (source, destination, Options, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, nil, opts, err
	}
	src, err := asSource(from)
	if err != nil {
		return nil, nil, opts, err
	}
	dst, err := asDestination(to)
	if err != nil {
		return nil, nil, opts, err
	}
	if from == to {
		return nil, nil, opts, errors.New("move: the source and the destination are the same outbox: name another outbox as the destination")
	}
	return src, dst, opts, nil
}
