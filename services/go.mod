module github.com/receiptflow/receiptflow/services

go 1.26.0

require github.com/receiptflow/receiptflow/pkg v0.0.0

replace (
	github.com/receiptflow/receiptflow/pkg => ../pkg
	github.com/receiptflow/receiptflow/schemas => ../schemas
)
