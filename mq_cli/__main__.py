from mq_cli.cli.main import main

main()
