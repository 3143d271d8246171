module github.com/goprovider/provider

go 1.26.8
