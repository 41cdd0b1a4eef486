from traincast.cli.main import main

main()
