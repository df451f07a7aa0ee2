module github.com/receiptflow/receiptflow/e2e

go 1.26.0

require github.com/receiptflow/receiptflow/pkg v0.0.0

require (
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/crypto v0.58.0
)

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/chromedp/chromedp v0.23.0
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2
)

replace (
	github.com/receiptflow/receiptflow/pkg => ../pkg
	github.com/receiptflow/receiptflow/schemas => ../schemas
)
