package bench

import (
	"context"
	"testing"
	"time"

	natsclient "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
)

// What a target makes on a server for a run is there until close, and gone
// after it.
func TestTargetsCleanUp(t *testing.T) {
	if testing.Short() {
		t.Skip("needs NATS, RabbitMQ and Redis")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exists := map[string]func(name string) bool{
		"nats": func(name string) bool {
			nc, err := natsclient.Connect(defaultSinkURLs["nats"])
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			_, err = js.Stream(ctx, name)
			return err == nil
		},
		"rabbitmq": func(name string) bool {
			conn, err := amqp.Dial(defaultSinkURLs["rabbitmq"])
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ch, _ := conn.Channel()
			_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				return false
			}
			ch, _ = conn.Channel()
			return ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil) == nil
		},
		"redis": func(name string) bool {
			c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
			defer c.Close()
			// The stream exists once written to; the key is checked for
			// absence only, after one entry is added here.
			n, _ := c.Exists(ctx, name).Result()
			return n == 1
		},
	}
	for kind, exists := range exists {
		t.Run(kind, func(t *testing.T) {
			tg, err := newTarget(ctx, Options{Sink: kind}, kafkaEnv{})
			if err != nil {
				t.Fatal(err)
			}
			if tg.made == "" {
				t.Fatal("no name of what was made")
			}
			if kind == "redis" {
				c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
				if err := c.XAdd(ctx, &goredis.XAddArgs{Stream: tg.made, Values: []string{"k", "v"}}).Err(); err != nil {
					t.Fatal(err)
				}
				_ = c.Close()
			}
			if !exists(tg.made) {
				t.Errorf("%s is not there during the run", tg.made)
			}
			tg.close()
			if exists(tg.made) {
				t.Errorf("%s is still there after close", tg.made)
			}
		})
	}
}
