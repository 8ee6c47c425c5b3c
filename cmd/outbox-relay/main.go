// Command outbox-relay relays transactional outbox rows to message brokers.
package main

import (
	"context"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/cli"
)

func main() {
	os.Exit(cli.Execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
