package embedded_test

import (
	"context"
	"fmt"

	"github.com/distsync/distsync/embedded"
)

func Example() {
	srv, err := embedded.Start()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := srv.NewClient()
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	fmt.Println(client.Do(ctx, client.B().Ping().Build()).ToString())
	// Output: PONG <nil>
}
