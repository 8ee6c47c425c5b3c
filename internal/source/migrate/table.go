package migrate

import (
	"context"
	"fmt"

	"github.com/pressly/goose/v3"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// Table creates and upgrades an outbox table the relay owns (the
// kafka_outbox table of preset kafka-outbox) in the application's schema.
// Its dialect keeps goose's version table beside it, named after it, so
// that the table's history travels with the application's schema and not
// with the relay's.
type Table struct {
	name  string
	close func() error
	prov  *goose.Provider
}

// NewTable loads the migrations of spec for the table called name (in
// errors). close releases the dialect's connections; it is called by Close,
// and here when the migrations cannot be loaded.
func NewTable(spec Spec, name string, close func() error) (*Table, error) {
	prov, err := spec.provider()
	if err != nil {
		if close != nil {
			_ = close()
		}
		return nil, fmt.Errorf("managed table %s: %w", name, err)
	}
	return &Table{name: name, close: close, prov: prov}, nil
}

// Close releases the connections.
func (m *Table) Close() error {
	if m.close == nil {
		return nil
	}
	return m.close()
}

// Up applies every pending migration of the table. The table's schema must
// exist (it is the application's).
func (m *Table) Up(ctx context.Context) error {
	if _, err := m.prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate managed table %s: %w", m.name, err)
	}
	return nil
}

// Status lists the table's migrations and whether each is applied.
func (m *Table) Status(ctx context.Context) ([]source.MigrationStatus, error) {
	st, err := m.prov.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("managed table %s: migration status: %w", m.name, err)
	}
	return applied(st), nil
}

// Apply applies every pending migration of the table a dialect opened, and
// closes it.
func Apply(ctx context.Context, m *Table, err error) error {
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Up(ctx)
}
