from fleettool.cli import main

main()
