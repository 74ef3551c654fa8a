from attnbench.cli.main import main

main()
