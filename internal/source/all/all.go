// Package all registers every built-in database driver (postgres, mysql)
// with package driver, so that a configuration may name them; a program
// that opens relays imports it for that effect. The dispatch queue (state
// mode queue) is served by the postgres driver.
package all

import (
	"github.com/outbox-relay/outbox-relay/internal/source/driver"
	"github.com/outbox-relay/outbox-relay/internal/source/mysql"
	"github.com/outbox-relay/outbox-relay/internal/source/postgres"
	"github.com/outbox-relay/outbox-relay/internal/source/queue"
)

func init() {
	driver.Register("postgres", postgres.NewDriver(queue.Mode))
	driver.Register("mysql", mysql.Driver{})
}
