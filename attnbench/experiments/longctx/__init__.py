"""The long-context flow shared by needle_4m and multihop: plan a grid of cells, get the models, evaluate them."""
