// Package inviqa does what the settings of inviqa/kafka-outbox-relay ask of
// the process beyond relaying: the one-shot cleanup and optimize jobs, the
// proxy sidecar hand-off after a job, and the idle mode of POLLING_DISABLED.
// The settings themselves are read by [config.FromInviqa], from the
// environment and from the flags that package compat adds to run.
package inviqa
