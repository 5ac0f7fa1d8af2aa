from voicecli.cli import main

main()
