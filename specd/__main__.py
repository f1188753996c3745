from specd.cli import main

main()
